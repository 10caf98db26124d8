"""A slow broker under a running stream (librdkafka's mock cluster, ``set_rtt``), and a checkpoint
that an older kafka_direct bricked under one.

How slow is "slow": the stream reader's offset requests wait 30 s (the admin reader's request
timeout; no option changes it). A leader that answers faster than that only slows the stream
down; one that answers slower gets librdkafka's OFFSET_INVALID (-1001) with no error for its
partitions, which an older kafka_direct wrote into Spark's offset log as an end offset: every
restart then failed on it ("a slow broker bricks the checkpoint").

Each failed offset request is made ``fetchOffset.numRetries`` times in all (default 3, counted
as Spark counts it) before the stream planner sees the partial answer, so with the defaults one
trigger under a slow leader lasts three request timeouts (90 s), during which no partition
advances. The tests set ``fetchOffset.numRetries=1`` to see the planner's handling after one
request timeout.
"""

from __future__ import annotations

import time

from tests.integration.faults.support import (
    OFFSET_INVALID,
    Feeder,
    KnownProducer,
    OffsetLogWatcher,
    commit_ids,
    read_offset_log,
    rewrite_offsets,
    wait_until,
)
from tests.integration.streams import Collector, expected_keys, start, wait_for

#: Above the reader's 30 s request timeout, so the slow leader's partitions get OFFSET_INVALID;
#: no more, because responses delayed before the RTT is restored still take this long.
SLOWER_THAN_THE_REQUEST_TIMEOUT_MS = 32_000
#: One request timeout with no retry: the planner sees the partial answer after 30 s.
ONE_ATTEMPT = {"fetchOffset.numRetries": "1"}


def _ends(log: dict[int, dict[str, dict[str, int]]], batch: int, topic: str) -> dict[int, int]:
    return {int(p): off for p, off in log[batch][topic].items()}


def _describe(log: dict[int, dict[str, dict[str, int]]], topic: str, before: int) -> str:
    """The offset log's batches from ``before`` on, one ``id: {partition: end}`` each."""
    return ", ".join(f"{b}: {_ends(log, b, topic)}" for b in sorted(log) if b >= before)


def test_regression_slow_broker_bricks_checkpoint_never_writes_a_negative_offset(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=3)
    slow = mock_topics.leader(0)  # partition 0's leader; 1 and 2 are led by the other brokers
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all(range(3), 20)
    producer.flush()
    checkpoint = tmp_path / "ck"
    sink = Collector()

    with OffsetLogWatcher(checkpoint) as watcher:
        query = queries(start(mock_stream(topic, **ONE_ATTEMPT), sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= 60, query, 90, "the first 60 records")
        before = max(read_offset_log(checkpoint))
        # Partition 0 is read to its end; from now on its leader answers after 32 s, while
        # records keep arriving on every partition.
        mock_cluster.set_rtt(slow, SLOWER_THAN_THE_REQUEST_TIMEOUT_MS)
        feeder = Feeder(producer, range(3))
        with feeder:

            def healthy_partitions_advanced_alone() -> bool:
                log = read_offset_log(checkpoint)
                assert query.exception() is None, query.exception()
                return any(
                    _ends(log, b, topic)[0] == 20
                    and min(_ends(log, b, topic)[1], _ends(log, b, topic)[2]) > 20
                    for b in log
                    if b > before
                )

            # One trigger waits one request timeout (30 s), then plans the other partitions. A
            # trigger whose metadata request went to the slow broker waits one timeout more and
            # plans nothing (no valid answer at all), so allow a few of those.
            wait_until(
                healthy_partitions_advanced_alone,
                180,
                "a batch planned under the fault",
                explain=lambda: _describe(read_offset_log(checkpoint), topic, before),
            )
            mock_cluster.set_rtt(slow, 0)
            wait_until(lambda: len(sink.rows) > 200, 90, "records read after the fault")
        feeder.stop()
        produced = producer.flush()
        wait_for(lambda: len(sink.rows) >= len(produced), query, 90, "every record")
        assert query.isActive and query.exception() is None
        assert sink.keys() == expected_keys(produced)
        query.stop()

        # A restart from this checkpoint reads on exactly where the stream stopped.
        producer.send_all(range(3), 10)
        produced = producer.flush()
        query = queries(start(mock_stream(topic, **ONE_ATTEMPT), sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= len(produced), query, 90, "the records after restart")
        query.stop()
    assert sink.keys() == expected_keys(produced)
    assert sink.mismatches == []
    assert watcher.negative() == []


def test_regression_bricked_checkpoint_is_repaired_on_restart(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=3)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    checkpoint = tmp_path / "ck"
    ran = Collector()
    options = {"maxOffsetsPerTrigger": "30"}  # several batches, so the last one is not the first

    producer.send_all(range(3), 40)
    produced = producer.flush()
    query = queries(start(mock_stream(topic, **options), ran, str(checkpoint)))
    wait_for(lambda: len(ran.rows) >= len(produced), query, 90, "the first 120 records")
    # The sink holds a batch's rows before Spark writes that batch's commit: wait for it.
    wait_until(
        lambda: commit_ids(checkpoint) == set(read_offset_log(checkpoint)),
        30,
        "the last batch's commit",
    )
    query.stop()
    log = read_offset_log(checkpoint)
    last = max(log)
    assert last >= 2 and commit_ids(checkpoint) == set(log)
    assert _ends(log, last, topic)[1] > _ends(log, last - 1, topic)[1]

    # What the old bug left: the last batch planned with partition 1's end offset -1001. Its
    # tasks failed on it, so it wrote no output and no commit; every restart failed again.
    def brick(offsets: dict[str, dict[str, int]]) -> None:
        offsets[topic]["1"] = OFFSET_INVALID

    rewrite_offsets(checkpoint, last, brick)
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    assert read_offset_log(checkpoint)[last][topic]["1"] == OFFSET_INVALID
    # The sink as the failed batch left it: every batch but the last one.
    sink = Collector()
    for batch_id, rows in ran.batches:
        if batch_id != last:
            sink.rows.extend(rows)
            sink.batches.append((batch_id, rows))

    producer.send_all(range(3), 25)
    produced = producer.flush()
    with OffsetLogWatcher(checkpoint) as watcher:
        query = queries(start(mock_stream(topic, **options), sink, str(checkpoint)))
        wait_for(lambda: len(sink.rows) >= len(produced), query, 90, "every record after repair")
        wait_until(lambda: max(commit_ids(checkpoint)) > last, 30, "a batch after the repair")
        time.sleep(1)  # a duplicate would land now
        assert query.isActive and query.exception() is None
        query.stop()
    assert sink.keys() == expected_keys(produced)
    assert sink.mismatches == []
    # The repaired batch re-ran with partition 1 not advanced; none after it holds -1001.
    assert watcher.negative() == [(last, topic, "1", OFFSET_INVALID)]


def test_regression_slow_broker_at_the_first_trigger_never_writes_a_placeholder(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    # Regression (review): with startingOffsets=latest, the first trigger answered the -1
    # placeholders when a leader gave no offset, and PySpark logs a query's first answer as
    # batch 0's end: {"t": {"0": -1, ...}} in the checkpoint. The trigger now waits for it.
    topic = mock_topics.create(partitions=3)
    slow = mock_topics.leader(0)
    before = KnownProducer(mock_cluster.bootstrap_servers, topic)
    before.send_all(range(3), 5)
    before.flush()
    checkpoint = tmp_path / "ck"
    sink = Collector()
    mock_cluster.set_rtt(slow, SLOWER_THAN_THE_REQUEST_TIMEOUT_MS)

    with OffsetLogWatcher(checkpoint) as watcher:
        stream = mock_stream(topic, startingOffsets="latest", **ONE_ATTEMPT)
        query = queries(start(stream, sink, str(checkpoint)))
        # The first request for partition 0's latest offset gets no valid answer after one
        # request timeout (30 s): the old code logged batch 0 then. Give it that long, plus a
        # margin; the fixed one is still waiting for the answer.
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not read_offset_log(checkpoint):
            assert query.exception() is None, query.exception()
            time.sleep(0.5)
        mock_cluster.set_rtt(slow, 0)
        wait_until(lambda: 0 in commit_ids(checkpoint), 90, "batch 0, pinned")
        after = KnownProducer(
            mock_cluster.bootstrap_servers, topic, numbering=dict.fromkeys(range(3), 5)
        )
        after.send_all(range(3), 10)
        produced = after.flush()
        wait_for(lambda: len(sink.rows) >= len(produced), query, 90, "the records after batch 0")
        assert query.isActive and query.exception() is None
        query.stop()
    assert watcher.negative() == []
    assert sink.keys() == expected_keys(produced)  # nothing from before the query started
