"""Gaps from transaction markers (SPARK-25005 shapes), topic discovery and data loss, against the
real broker. Aborted transactions under both isolation levels, DeleteRecords and CreatePartitions
are in test_real_kafka_behaviour.py."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.integration.kafka_helpers import create_topic, delete_topic, produce_known
from tests.integration.streams import Collector, expected_keys, start, wait_for


@pytest.fixture(scope="module")
def tx_topic(kafka_bootstrap):
    topic = f"tx-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    data = transactions(kafka_bootstrap, topic, [(5, True), (3, True)])
    # data 0..4, marker 5, data 6..8, marker 9: the log ends on a marker.
    assert data == [0, 1, 2, 3, 4, 6, 7, 8]
    return topic


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (5, 6, []),  # a range made only of a control record
        (5, 9, [6, 7, 8]),  # the range's first offset is a marker
        (6, 10, [6, 7, 8]),  # the last offset is a marker, at the log end: the classic stall
        (0, 6, [0, 1, 2, 3, 4]),  # the last offset is a marker followed by data
        (0, 10, [0, 1, 2, 3, 4, 6, 7, 8]),  # a gap in the middle
        (9, 10, []),  # only the final marker
    ],
    ids=[
        "only-marker",
        "first-is-marker",
        "last-is-marker-at-end",
        "last-is-marker",
        "gap-middle",
        "final-marker",
    ],
)
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_transaction_marker_gaps_read_exactly_the_data_without_hanging(
    reader, tx_topic, start, end, expected, isolation
):
    df = reader(
        subscribe=tx_topic,
        startingOffsets=json.dumps({tx_topic: {"0": start}}),
        endingOffsets=json.dumps({tx_topic: {"0": end}}),
        **{"kafka.isolation.level": isolation, "kafkaConsumer.pollTimeoutMs": "15000"},
    ).load()
    # A range that stalled on a marker would wait for its poll timeout and then fail the query.
    offsets = sorted(r["offset"] for r in df.select("offset").collect())
    assert offsets == expected


def transactions(bootstrap: str, topic: str, plan: list[tuple[int, bool]]) -> list[int]:
    """One transaction per (size, commit) in ``plan``, committed or aborted in that order.

    Flushed before each end: librdkafka drops records it has not sent when a transaction aborts,
    and the test needs the aborted records in the log.
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    offsets: list[int] = []
    for n, (size, commit) in enumerate(plan):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(
                topic,
                value=f"tx{n}-{i}".encode(),
                partition=0,
                on_delivery=lambda err, msg: offsets.append(msg.offset()),
            )
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    return sorted(offsets)


@pytest.fixture(scope="module")
def aborted_tx_topic(kafka_bootstrap):
    topic = f"txa-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    data = transactions(kafka_bootstrap, topic, [(3, True), (2, False), (2, True), (1, False)])
    # committed 0..2, marker 3; aborted 4..5, marker 6; committed 7..8, marker 9;
    # aborted 10, marker 11: the log ends on an aborted record and its marker.
    assert data == [0, 1, 2, 4, 5, 7, 8, 10]
    return topic


@pytest.mark.parametrize(
    ("start", "end", "committed", "uncommitted"),
    [
        (4, 7, [], [4, 5]),  # a range made only of an aborted transaction and its marker
        (4, 9, [7, 8], [4, 5, 7, 8]),  # the range's first offsets are aborted
        (7, 12, [7, 8], [7, 8, 10]),  # it ends on aborted records and a marker, at the log end
        (0, 9, [0, 1, 2, 7, 8], [0, 1, 2, 4, 5, 7, 8]),  # an aborted gap in the middle
    ],
    ids=["only-aborted", "first-is-aborted", "last-is-aborted-at-end", "aborted-gap-middle"],
)
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_aborted_transaction_gaps_read_exactly_the_data_without_hanging(
    reader, aborted_tx_topic, start, end, committed, uncommitted, isolation
):
    df = reader(
        subscribe=aborted_tx_topic,
        startingOffsets=json.dumps({aborted_tx_topic: {"0": start}}),
        endingOffsets=json.dumps({aborted_tx_topic: {"0": end}}),
        **{"kafka.isolation.level": isolation, "kafkaConsumer.pollTimeoutMs": "15000"},
    ).load()
    offsets = sorted(r["offset"] for r in df.select("offset").collect())
    assert offsets == (committed if isolation == "read_committed" else uncommitted)


def test_stream_over_a_transactional_topic_reads_every_committed_record(reader, tx_topic, tmp_path):
    sink = Collector()
    df = reader(stream=True, subscribe=tx_topic, startingOffsets="earliest").load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(120)
    assert sorted(r.offset for r in sink.rows) == [0, 1, 2, 3, 4, 6, 7, 8]


def test_subscribe_pattern_picks_up_a_topic_created_while_running(
    reader, kafka_bootstrap, tmp_path
):
    prefix = f"disc-{uuid.uuid4().hex[:8]}"
    first = f"{prefix}-a"
    create_topic(kafka_bootstrap, first, partitions=1)
    records = produce_known(kafka_bootstrap, first, per_partition=5)
    sink = Collector()
    df = reader(stream=True, subscribePattern=f"{prefix}-.*", startingOffsets="earliest").load()
    query = start(df, sink, str(tmp_path / "ck"))
    wait_for(lambda: len(sink.rows) >= 5, query, what="the first topic")

    second = f"{prefix}-b"
    create_topic(kafka_bootstrap, second, partitions=2)
    records += produce_known(kafka_bootstrap, second, per_partition=7, partitions=2)
    wait_for(lambda: len(sink.rows) >= 19, query, what="the new topic's records")
    time.sleep(1)
    query.stop()
    assert sink.keys() == expected_keys(records)


def _recreate_with_fewer_records(bootstrap: str, topic: str) -> list:
    delete_topic(bootstrap, topic)
    create_topic(bootstrap, topic, partitions=1)
    return produce_known(bootstrap, topic, per_partition=3, start_index=100)


def test_recreated_topic_fails_clearly_with_fail_on_data_loss(
    reader, kafka_bootstrap, make_topic, tmp_path
):
    topic = make_topic()
    produce_known(kafka_bootstrap, topic, per_partition=10)
    sink = Collector()
    df = reader(stream=True, subscribe=topic, startingOffsets="earliest").load()
    query = start(df, sink, str(tmp_path / "ck"))
    wait_for(lambda: len(sink.rows) >= 10, query, what="the original records")
    _recreate_with_fewer_records(kafka_bootstrap, topic)
    deadline = time.monotonic() + 60
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
    error = query.exception()
    query.stop()
    assert error is not None, "the query should have failed on data loss"
    message = str(error)
    assert f"Data loss on {topic}-0" in message
    assert "failOnDataLoss" in message


def test_recreated_topic_continues_with_fail_on_data_loss_false(
    reader, kafka_bootstrap, make_topic, tmp_path, worker_log
):
    """A checkpoint whose offsets lie past the end of a recreated topic: warned, then read from
    the new topic's start, every record once.

    The topic is recreated while the query is stopped, not under it. On the embedded broker a
    consumer still assigned to the deleted topic crashes its process: Tansu's Fetch answer for
    the unknown topic id carries KIP-951 leader tags, and librdkafka 2.16 then looks the topic
    up by a NULL name (README, "Known limits"). A fresh group id gives the restarted query fresh
    consumers, and the pause lets the old ones meet the deleted topic while no task runs in
    their processes.
    """
    topic = make_topic()
    old = produce_known(kafka_bootstrap, topic, per_partition=10)
    sink = Collector()
    checkpoint = str(tmp_path / "ck")

    def stream(prefix: str) -> object:
        df = reader(
            stream=True,
            subscribe=topic,
            startingOffsets="earliest",
            failOnDataLoss="false",
            groupIdPrefix=prefix,
        ).load()
        return start(df, sink, checkpoint)

    query = stream("before")
    wait_for(lambda: len(sink.rows) >= 10, query, what="the original records")
    query.stop()
    new = _recreate_with_fewer_records(kafka_bootstrap, topic)
    time.sleep(3)
    query = stream("after")
    wait_for(lambda: len(sink.rows) >= 13, query, what="the recreated topic's records")
    time.sleep(1)
    query.stop()
    assert sink.keys() == expected_keys(old + new)
    # Never silent: the warning leaves the Spark driver or worker (here KAFKA_DIRECT_LOG_FILE).
    assert f"Data loss on {topic}-0" in worker_log.read_text()
