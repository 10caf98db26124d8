"""What only a real Apache Kafka broker does, read end to end through Spark.

Each test here replaces a workaround for the embedded Tansu broker (docs/brokers.md) with the
behaviour itself: aborted transactions filtered under read_committed, timestamp lookups,
LogAppendTime topics, DeleteRecords, and partitions added under a running stream (retention and
compaction: test_retention.py, test_compaction.py). They run on
the session's Kafka broker (`kafka_bootstrap`), never in the Tansu smoke set.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.kafka_helpers import Record, create_topic, produce_known
from tests.integration.streams import Collector, expected_keys, start, wait_for
from tests.integration.test_pushdown import tasks_read

BASE_TS_MS = 1_700_000_000_000
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _offsets(df: Any) -> list[int]:
    return sorted(r["offset"] for r in df.select("offset").collect())


def _has(sink: Collector, record: Record) -> bool:
    return any((r.partition, r.offset) == (record.partition, record.offset) for r in sink.rows)


# -- aborted transactions ------------------------------------------------------------------------


def _transactions(bootstrap: str, topic: str, plan: list[tuple[int, bool]]) -> None:
    """One transaction per (size, commit?) on partition 0, in order."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    for n, (size, commit) in enumerate(plan):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, value=f"tx{n}-{i}".encode(), partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: librdkafka purges what it has not sent yet when a transaction
            # aborts, and the log would then hold neither the records nor an abort marker.
            assert producer.flush(30) == 0
            producer.abort_transaction(30)


@pytest.fixture(scope="module")
def aborted_topic(kafka_bootstrap: str) -> str:
    # Log: committed 0..2, marker 3; aborted 4..5, abort marker 6; committed 7..8, marker 9.
    topic = f"abort-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    _transactions(kafka_bootstrap, topic, [(3, True), (2, False), (2, True)])
    return topic


@pytest.mark.parametrize(
    ("isolation", "expected"),
    [
        ("read_uncommitted", [0, 1, 2, 4, 5, 7, 8]),
        ("read_committed", [0, 1, 2, 7, 8]),
    ],
)
def test_aborted_records_are_filtered_only_under_read_committed(
    reader: Any, aborted_topic: str, isolation: str, expected: list[int]
) -> None:
    df = reader(subscribe=aborted_topic, **{"kafka.isolation.level": isolation}).load()
    values = {0: b"tx0-0", 1: b"tx0-1", 2: b"tx0-2", 4: b"tx1-0", 5: b"tx1-1", 7: b"tx2-0"}
    values[8] = b"tx2-1"
    rows = df.select("offset", "value").collect()
    assert sorted((r["offset"], bytes(r["value"])) for r in rows) == [
        (o, values[o]) for o in expected
    ]


def test_a_read_committed_stream_skips_the_aborted_transaction(
    reader: Any, aborted_topic: str, tmp_path: Any
) -> None:
    sink = Collector()
    df = reader(
        stream=True,
        subscribe=aborted_topic,
        startingOffsets="earliest",
        **{"kafka.isolation.level": "read_committed"},
    ).load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(120)
    assert sorted(r.offset for r in sink.rows) == [0, 1, 2, 7, 8]


# -- timestamps ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stamped_topic(kafka_bootstrap: str) -> str:
    """Ten records per partition (2 partitions), record i stamped BASE_TS_MS + 1000 * i."""
    topic = f"stamps-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for p in range(2):
        for i in range(10):
            producer.produce(
                topic, f"p{p}-{i}".encode(), partition=p, timestamp=BASE_TS_MS + 1000 * i
            )
    assert producer.flush(30) == 0
    return topic


def _pairs(df: Any) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())


def test_starting_timestamp_finds_the_first_record_at_or_after_it(
    reader: Any, stamped_topic: str
) -> None:
    # 500 ms after record 3: the first record at or after it is record 4, in both partitions.
    df = reader(subscribe=stamped_topic, startingTimestamp=str(BASE_TS_MS + 3500)).load()
    assert _pairs(df) == [(p, o) for p in range(2) for o in range(4, 10)]


def test_starting_and_ending_offsets_by_timestamp_per_partition(
    reader: Any, stamped_topic: str
) -> None:
    df = reader(
        subscribe=stamped_topic,
        startingOffsetsByTimestamp=json.dumps(
            {stamped_topic: {"0": BASE_TS_MS + 2000, "1": BASE_TS_MS + 7000}}
        ),
        endingOffsetsByTimestamp=json.dumps(
            {stamped_topic: {"0": BASE_TS_MS + 5000, "1": BASE_TS_MS + 9000}}
        ),
    ).load()
    # Ending offsets are exclusive: the record stamped at the ending timestamp is not read.
    assert _pairs(df) == [(0, 2), (0, 3), (0, 4), (1, 7), (1, 8)]


def test_a_starting_timestamp_after_the_last_record_follows_the_strategy(
    reader: Any, stamped_topic: str
) -> None:
    late = str(BASE_TS_MS + 60_000)  # Kafka answers -1: no record that recent
    df = reader(
        subscribe=stamped_topic,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    ).load()
    assert _pairs(df) == []
    with pytest.raises(Exception, match=r"(?s)startingTimestamp|timestamp"):
        reader(subscribe=stamped_topic, startingTimestamp=late).load().collect()


def test_a_timestamp_filter_narrows_the_read_on_the_broker(
    spark: Any, reader: Any, stamped_topic: str, task_stats_dir: Any
) -> None:
    """A lower timestamp bound becomes a timestamp lookup: the tasks start at record 6, so they
    read 4 of the 10 records of each partition (on Tansu every lookup answered 0)."""
    previous = spark.conf.get(PUSHDOWN)
    spark.conf.set(PUSHDOWN, "true")
    try:
        since = time.time()
        df = reader(subscribe=stamped_topic).load()
        lower = dt.datetime.fromtimestamp((BASE_TS_MS + 6000) / 1000, tz=dt.timezone.utc)
        assert _pairs(df.where(df.timestamp >= lower)) == [
            (p, o) for p in range(2) for o in range(6, 10)
        ]
    finally:
        spark.conf.set(PUSHDOWN, previous)
    assert tasks_read(task_stats_dir, stamped_topic, since) == {(0, 6, 10): 4, (1, 6, 10): 4}


# -- LogAppendTime -------------------------------------------------------------------------------


def test_log_append_time_topics_carry_the_brokers_time(
    reader: Any, kafka_bootstrap: str, make_topic: Any
) -> None:
    topic = make_topic(config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000) - 1000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), timestamp=BASE_TS_MS + i)
    assert producer.flush(30) == 0
    rows = reader(subscribe=topic).load().select("offset", "timestamp", "timestampType").collect()
    assert sorted(r["offset"] for r in rows) == [0, 1, 2, 3, 4]
    assert {r["timestampType"] for r in rows} == {1}
    # The broker's clock replaced the producer's 2023 stamps.
    assert all(r["timestamp"].timestamp() * 1000 >= before_ms for r in rows)


def test_an_upper_timestamp_bound_cuts_a_log_append_time_topic_on_the_broker(
    spark: Any, reader: Any, kafka_bootstrap: str, make_topic: Any, task_stats_dir: Any
) -> None:
    """On a LogAppendTime topic timestamps grow with offsets, so an upper bound becomes a lookup
    that ends the task's range (a CreateTime topic is never cut: a late record could follow)."""
    topic = make_topic(config={"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, f"first-{i}".encode())
    assert producer.flush(30) == 0
    first = reader(subscribe=topic).load().select("timestamp").collect()
    latest_first = max(r["timestamp"] for r in first)
    # The second batch must be appended at a later broker millisecond than the first (PySpark
    # hands timestamps out as naive local times).
    while dt.datetime.now() <= latest_first:
        time.sleep(0.01)
    for i in range(5):
        producer.produce(topic, f"second-{i}".encode())
    assert producer.flush(30) == 0
    rows = reader(subscribe=topic).load().select("offset", "timestamp").collect()
    second_ts = min(r["timestamp"] for r in rows if r["offset"] >= 5)
    assert second_ts > latest_first
    previous = spark.conf.get(PUSHDOWN)
    spark.conf.set(PUSHDOWN, "true")
    try:
        since = time.time()
        df = reader(subscribe=topic).load()
        assert _offsets(df.where(df.timestamp < second_ts)) == [0, 1, 2, 3, 4]
    finally:
        spark.conf.set(PUSHDOWN, previous)
    assert tasks_read(task_stats_dir, topic, since) == {(0, 0, 5): 5}


# -- DeleteRecords -------------------------------------------------------------------------------


def _delete_records(bootstrap: str, topic: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, before)], request_timeout=30)
    for future in futures.values():
        assert future.result(30).low_watermark == before


def test_delete_records_moves_the_earliest_offset(
    reader: Any, kafka_bootstrap: str, make_topic: Any
) -> None:
    topic = make_topic()
    produce_known(kafka_bootstrap, topic, per_partition=10)
    _delete_records(kafka_bootstrap, topic, 4)
    assert _offsets(reader(subscribe=topic, startingOffsets="earliest").load()) == list(
        range(4, 10)
    )


def test_a_timestamp_lookup_after_delete_records_starts_at_the_new_log_start(
    reader: Any, kafka_bootstrap: str, make_topic: Any
) -> None:
    """Kafka's lookup searches only what the log still holds: a timestamp older than every
    record finds the new log start, not a deleted offset (so no data loss is reported)."""
    topic = make_topic()
    produce_known(kafka_bootstrap, topic, per_partition=10, base_ts_ms=BASE_TS_MS)
    _delete_records(kafka_bootstrap, topic, 4)
    df = reader(subscribe=topic, startingTimestamp=str(BASE_TS_MS)).load()
    assert _offsets(df) == list(range(4, 10))
    df = reader(subscribe=topic, startingTimestamp=str(BASE_TS_MS + 6)).load()
    assert _offsets(df) == list(range(6, 10))


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_a_batch_range_into_deleted_records_follows_fail_on_data_loss(
    reader: Any, kafka_bootstrap: str, make_topic: Any, fail_on_data_loss: bool
) -> None:
    topic = make_topic()
    produce_known(kafka_bootstrap, topic, per_partition=10)
    _delete_records(kafka_bootstrap, topic, 4)
    df = reader(
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 1}}),
        failOnDataLoss=str(fail_on_data_loss).lower(),
    ).load()
    if fail_on_data_loss:
        with pytest.raises(Exception, match=rf"Data loss on {topic}-0"):
            df.collect()
    else:
        assert _offsets(df) == list(range(4, 10))


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_records_deleted_under_a_running_stream(
    reader: Any,
    kafka_bootstrap: str,
    make_topic: Any,
    tmp_path: Any,
    fail_on_data_loss: bool,
) -> None:
    topic = make_topic()
    first = produce_known(kafka_bootstrap, topic, per_partition=5)
    sink = Collector()
    df = reader(
        stream=True,
        subscribe=topic,
        startingOffsets="earliest",
        failOnDataLoss=str(fail_on_data_loss).lower(),
    ).load()
    query = start(df, sink, str(tmp_path / "ck"))
    try:
        wait_for(lambda: len(sink.rows) >= 5, query, what="the first records")
        query.stop()
        # While the query is stopped: 5 more records, of which the first 3 are then deleted.
        more = produce_known(kafka_bootstrap, topic, per_partition=5, start_index=5)
        _delete_records(kafka_bootstrap, topic, 8)
        query = start(df, sink, str(tmp_path / "ck"))
        if fail_on_data_loss:
            deadline = time.monotonic() + 60
            while query.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            error = query.exception()
            assert error is not None, "the query should have failed on data loss"
            assert f"Data loss on {topic}-0" in str(error)
        else:
            # The last record read means every batch before it was delivered too.
            wait_for(lambda: _has(sink, more[-1]), query, what="the last record")
            kept: list[Record] = first + [r for r in more if r.offset >= 8]
            assert sink.keys() == expected_keys(kept)
    finally:
        query.stop()


# -- CreatePartitions ----------------------------------------------------------------------------


def test_partitions_added_under_a_running_stream_are_read_from_their_start(
    reader: Any, kafka_bootstrap: str, make_topic: Any, tmp_path: Any
) -> None:
    topic = make_topic(partitions=1)
    records = produce_known(kafka_bootstrap, topic, per_partition=5)
    sink = Collector()
    df = reader(stream=True, subscribe=topic, startingOffsets="earliest").load()
    query = start(df, sink, str(tmp_path / "ck"))
    try:
        wait_for(lambda: len(sink.rows) >= 5, query, what="the first partition")
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(30)
        # Produced to the new partitions right away: a new partition is read from its
        # earliest offset, as Spark does, so none of these may be missed.
        records += produce_known(
            kafka_bootstrap, topic, per_partition=4, partitions=3, start_index=100
        )
        last = [
            max((r for r in records if r.partition == p), key=lambda r: r.offset) for p in range(3)
        ]
        wait_for(
            lambda: all(_has(sink, r) for r in last), query, what="the new partitions' records"
        )
    finally:
        query.stop()
    assert sink.keys() == expected_keys(records)
