"""The DStream-style direct stream (KafkaUtils.createDirectStream) on the real broker and a real
local Spark: exact output, commits to the Kafka group, restart from them, failures, rate limits
and backpressure. Assertions are on offsets, batch sizes and rates, never on speed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafka_direct.dstream.kafka_utils import KafkaUtils
from kafka_direct.dstream.strategies import ConsumerStrategies, LocationStrategies
from kafka_direct.dstream.stream import BatchFailedError, DirectKafkaStream
from kafka_direct.errors import OffsetConflictError
from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.offsets import OffsetRange, TopicPartition
from tests.integration.kafka_helpers import Record, new_topic_name, produce_known

WAIT_S = 60.0


class Sink:
    """A batch function that keeps every batch's ranges and rows (and checks they agree)."""

    def __init__(self, stream: DirectKafkaStream | None = None, commit: bool = True) -> None:
        self.stream = stream
        self.commit = commit
        self.batches: list[tuple[list[OffsetRange], list[tuple[str, int, int, bytes]]]] = []
        self.columns: list[list[str]] = []
        self.lock = threading.Lock()
        self.before: Callable[[list[OffsetRange]], None] | None = None

    def __call__(self, df: Any, ranges: list[OffsetRange]) -> None:
        if self.before is not None:
            self.before(ranges)
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        with self.lock:
            self.batches.append((ranges, rows))
            self.columns.append(list(df.columns))
        if self.commit and self.stream is not None:
            self.stream.commitAsync(ranges)

    @property
    def rows(self) -> list[tuple[str, int, int, bytes]]:
        with self.lock:
            return [row for _, rows in self.batches for row in rows]


def expected(records: list[Record]) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, r.value) for r in records)


def wait_until(stream: DirectKafkaStream, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if stream.exception() is not None:
            raise AssertionError(f"stream failed waiting for {what}: {stream.exception()}")
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")


def direct_stream(
    spark: Any,
    bootstrap: str,
    topics: list[str],
    group: str,
    sink: Sink,
    **kwargs: Any,
) -> DirectKafkaStream:
    params = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe(topics, params),
        **{"batchInterval": 0.5, **kwargs},
    )
    sink.stream = stream
    stream.foreachBatch(sink)
    return stream


def test_exact_output_commits_after_the_function_and_restart_resumes_from_them(
    spark, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=2)
    group = new_topic_name("g")
    first = produce_known(kafka_bootstrap, topic, per_partition=30, partitions=2)
    kafka = {"bootstrap.servers": kafka_bootstrap}
    sink = Sink()
    seen_commits: list[tuple[dict[TopicPartition, int], dict[TopicPartition, int]]] = []

    def check_commits(_ranges: list[OffsetRange]) -> None:
        # What the group holds when the function starts: the previous batch's ends only.
        ends = (
            {r.topic_partition: r.until_offset for r in sink.batches[-1][0]} if sink.batches else {}
        )
        seen_commits.append(
            (fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group), ends)
        )

    sink.before = check_commits
    stream = direct_stream(spark, kafka_bootstrap, [topic], group, sink, maxRatePerPartition=20)
    stream.start()
    wait_until(stream, lambda: len(sink.rows) >= 60, "the first 60 records")
    stream.stop(graceful=True)
    assert stream.awaitTermination(0)

    assert sorted(sink.rows) == expected(first)  # every record once
    for ranges, rows in sink.batches:
        # The rows are exactly the ranges (no gaps in this topic), and 20/s × 0.5 s caps them.
        for r in ranges:
            got = sorted(o for t, p, o, _ in rows if (t, p) == (r.topic, r.partition))
            assert got == list(range(r.from_offset, r.until_offset))
            assert r.count() <= 10
    sizes = [sum(r.count() for r in ranges) for ranges, _ in sink.batches]
    assert sizes[:3] == [20, 20, 20]
    # At the start of each batch the group holds exactly the previous batch's ends: the commit
    # of a batch lands after its function returned, and only then.
    assert seen_commits[0] == ({}, {})
    for committed, previous_ends in seen_commits:
        assert committed == previous_ends
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    final = fetch_group_offsets(kafka, group, tps)
    assert final == {tps[0]: 30, tps[1]: 30}
    assert stream.lastProgress is not None
    assert [b.num_records for b in stream.batches] == sizes

    # A new stream with the same group resumes at the committed offsets: no loss, no duplicate.
    second = produce_known(kafka_bootstrap, topic, per_partition=15, partitions=2, start_index=30)
    sink2 = Sink()
    stream2 = direct_stream(spark, kafka_bootstrap, [topic], group, sink2)
    stream2.start()
    wait_until(stream2, lambda: len(sink2.rows) >= 30, "the 30 new records")
    time.sleep(1.0)  # give a wrongly re-read batch the chance to show up
    stream2.stop()
    assert sorted(sink2.rows) == expected(second)
    assert sink2.batches[0][0][0].from_offset == 30
    final = fetch_group_offsets(kafka, group, tps)
    assert final == {tps[0]: 45, tps[1]: 45}


def test_nothing_is_committed_without_commit_async_and_empty_batches_have_the_schema(
    spark, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=1)
    group = new_topic_name("g")
    produced = produce_known(kafka_bootstrap, topic, per_partition=12)
    sink = Sink(commit=False)
    stream = direct_stream(spark, kafka_bootstrap, [topic], group, sink)
    stream.start()
    wait_until(stream, lambda: len(sink.batches) >= 3 and len(sink.rows) >= 12, "three batches")
    stream.stop()
    assert sorted(sink.rows) == expected(produced)
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group) == {}
    sizes = [sum(r.count() for r in ranges) for ranges, _ in sink.batches]
    assert sizes[0] == 12 and set(sizes[1:]) == {0}
    # An empty batch still calls the function, with an empty DataFrame of the source's schema.
    assert sink.columns[1] == sink.columns[0]
    assert sink.columns[1] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]


def test_a_failing_function_is_not_committed_and_stops_the_stream(
    spark, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=1)
    group = new_topic_name("g")
    produce_known(kafka_bootstrap, topic, per_partition=30)
    sink = Sink()
    calls: list[int] = []

    def fail_second(_ranges: list[OffsetRange]) -> None:
        calls.append(1)
        if len(calls) == 2:
            assert sink.stream is not None
            sink.stream.commitAsync(_ranges)  # queued by a batch that then fails
            raise RuntimeError("sink unavailable")

    sink.before = fail_second
    stream = direct_stream(spark, kafka_bootstrap, [topic], group, sink, maxRatePerPartition=20)
    stream.start()
    with pytest.raises(BatchFailedError, match="sink unavailable") as info:
        stream.awaitTermination(WAIT_S)
    assert info.value.batch_id == 1
    assert info.value.offset_ranges == [OffsetRange(topic, 0, 10, 20)]
    tp = TopicPartition(topic, 0)
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group, [tp]) == {tp: 10}
    assert not stream.isActive


def test_a_second_copy_of_a_stream_on_the_same_group_is_stopped(spark, kafka_bootstrap, make_topic):
    # Regression (review): neither copy joins the group and Kafka takes admin commits for a
    # group without members, so two copies read everything and committed in turn, silently.
    topic, group = make_topic(), new_topic_name("g")
    produce_known(kafka_bootstrap, topic, per_partition=10)
    first = direct_stream(spark, kafka_bootstrap, [topic], group, Sink())
    first.start()
    wait_until(first, lambda: any(b.committed for b in first.batches), "the first commit")
    second = direct_stream(spark, kafka_bootstrap, [topic], group, Sink())
    second.start()  # starts where the first copy stands; both commit the same offsets
    copies = [first, second]
    deadline = time.monotonic() + WAIT_S
    while all(c.exception() is None for c in copies) and time.monotonic() < deadline:
        time.sleep(0.1)
    for copy in copies:
        copy.stop()
    errors = [c.exception() for c in copies if c.exception() is not None]
    # Whichever commits after the other's commit is refused, and stops.
    assert len(errors) == 1 and isinstance(errors[0], OffsetConflictError), errors
    assert f"group '{group}'" in str(errors[0]) and "second copy" in str(errors[0])


def test_backpressure_shrinks_batches_to_what_a_slow_function_can_handle(
    spark, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=2)
    group = new_topic_name("g")
    produce_known(kafka_bootstrap, topic, per_partition=2_000, partitions=2)
    per_record_s = 0.01  # the function handles at most 100 records/s
    sink = Sink()

    def slow(ranges: list[OffsetRange]) -> None:
        time.sleep(sum(r.count() for r in ranges) * per_record_s)

    sink.before = slow
    # Warm Spark's Python workers first, or the first batch's processing time is mostly start-up.
    KafkaUtils.createRDD(
        spark, {"bootstrap.servers": kafka_bootstrap}, [OffsetRange(topic, 0, 0, 1)]
    ).collect()
    stream = direct_stream(
        spark,
        kafka_bootstrap,
        [topic],
        group,
        sink,
        batchInterval=1.0,
        backpressure=True,
        initialRate=200,
        pidMinRate=10,
    )
    stream.start()
    wait_until(stream, lambda: len(stream.batches) >= 9, "nine batches")
    stream.stop()
    infos = stream.batches
    sizes = [b.num_records for b in infos]
    rates = [b.rate for b in infos]
    # Until the estimator has a rate (it needs two batches), the initial rate applies.
    assert rates[0] == rates[1] == 200
    assert sizes[0] == sizes[1] == 200  # 100 per partition: equal lags share it equally
    # No batch reads more than its rate allows: no unbounded backlog inside a batch.
    for info in infos:
        assert info.rate is not None
        assert info.num_records <= info.rate * 1.0 + 2
    # The rate came down to about what the function can handle (100/s, less Spark's overhead),
    # and later batches fit the interval instead of piling up delay.
    tail = infos[-4:]
    assert all(5 <= b.num_records <= 150 for b in tail), sizes
    # Either the delay the first big batches built up is being worked off, or (on a machine so
    # loaded that Spark's own overhead fills the interval) the rate is at its minimum.
    assert max(b.scheduling_delay_s for b in tail) < max(b.scheduling_delay_s for b in infos) or (
        all(b.rate == 10 for b in tail)
    ), [(b.num_records, b.rate, round(b.scheduling_delay_s, 2)) for b in infos]
    # Every record read so far was read once.
    assert len(set(sink.rows)) == len(sink.rows) == sum(sizes)


def test_create_rdd_reads_exactly_the_given_ranges(spark, kafka_bootstrap, make_topic):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=20, partitions=2)
    ranges = [
        OffsetRange(topic, 0, 3, 7),
        OffsetRange(topic, 1, 0, 2),
        OffsetRange(topic, 0, 15, 20),
    ]
    df = KafkaUtils.createRDD(spark, {"bootstrap.servers": kafka_bootstrap}, ranges)
    rows = sorted((r["topic"], r["partition"], r["offset"], r["value"]) for r in df.collect())
    wanted = [
        rec
        for rec in expected(produced)
        if (rec[1] == 0 and (3 <= rec[2] < 7 or 15 <= rec[2] < 20)) or (rec[1] == 1 and rec[2] < 2)
    ]
    assert rows == wanted


def test_non_graceful_stop_cancels_the_running_batch_and_commits_nothing(
    spark, kafka_bootstrap, make_topic
):
    topic = make_topic(partitions=1)
    group = new_topic_name("g")
    produce_known(kafka_bootstrap, topic, per_partition=5)
    entered = threading.Event()
    errors: list[str] = []

    def stuck(df: Any, ranges: list[OffsetRange]) -> None:
        stream.commitAsync(ranges)
        entered.set()
        try:
            # A Spark job that would run for minutes unless stop(graceful=False) cancels it.
            df.rdd.map(lambda row: time.sleep(300) or row).count()
        except Exception as exc:
            errors.append(str(exc))
            raise

    params = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
    }
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Assign([(topic, 0)], params),
        batchInterval=0.5,
    )
    stream.foreachBatch(stuck)
    stream.start()
    assert entered.wait(WAIT_S)
    stream.stop(graceful=False, timeout=WAIT_S)
    assert stream.awaitTermination(0)  # stopped, not failed
    assert stream.exception() is None
    assert errors and "cancel" in errors[0].lower()
    assert fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, group) == {}


def test_a_topic_matching_the_pattern_later_is_read_from_its_beginning(
    spark, kafka_bootstrap, make_topic
):
    prefix = new_topic_name("pat")
    group = new_topic_name("g")
    from tests.integration.kafka_helpers import create_topic

    create_topic(kafka_bootstrap, f"{prefix}-a", partitions=1)
    old = produce_known(kafka_bootstrap, f"{prefix}-a", per_partition=5)
    sink = Sink()
    params = {"bootstrap.servers": kafka_bootstrap, "group.id": group}  # reset: latest
    stream = KafkaUtils.createDirectStream(
        spark,
        LocationStrategies.PreferBrokers(),
        ConsumerStrategies.SubscribePattern(f"{prefix}-.*", params),
        batchInterval=0.5,
    )
    sink.stream = stream
    stream.foreachBatch(sink)
    stream.start()
    wait_until(stream, lambda: len(sink.batches) >= 1, "the first batch")
    create_topic(kafka_bootstrap, f"{prefix}-b", partitions=1)
    new = produce_known(kafka_bootstrap, f"{prefix}-b", per_partition=8)
    more = produce_known(kafka_bootstrap, f"{prefix}-a", per_partition=3, start_index=5)
    wait_until(stream, lambda: len(sink.rows) >= 11, "the new topic's records")
    stream.stop()
    assert old  # written before the start: skipped (auto.offset.reset=latest)
    assert sorted(sink.rows) == expected(new + more)
