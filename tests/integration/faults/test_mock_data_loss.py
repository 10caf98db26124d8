"""Records deleted before a stream read them (DeleteRecords on librdkafka's mock cluster; Tansu
cannot delete records): one step to the new log start, reported once, with
``failOnDataLoss=false``; a clear ``DataLossError`` with ``true``, found on the driver whatever
the executors still hold prefetched.

The deletions are placed with the sink's hooks (:class:`HookedCollector`): between two batches
(the next batch's planning finds it on the driver), or between a batch's planning and its read
(its executors find it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka_direct.offsets import TopicPartition
from kafka_direct.source.listener import LagListener, LagReport
from tests.integration.faults.support import (
    HookedCollector,
    KnownProducer,
    commit_ids,
    read_offset_log,
    wait_until,
)
from tests.integration.kafka_helpers import Record
from tests.integration.streams import Collector, expected_keys, start, wait_for

PER_PARTITION = 200
DELETED_BEFORE = 150  # partition 0's new log start
#: 10 offsets per partition per batch (of 2), so the stream is far from the end when the
#: deletion comes, and a crawl through the gap would show as many batches.
SLOW = {"maxOffsetsPerTrigger": "20"}
FAULT_BATCH = 2


def _offsets(sink: Collector, partition: int) -> list[int]:
    return sorted(r.offset for r in sink.rows if r.partition == partition)


def _first_offsets(sink: Collector, partition: int) -> dict[int, int]:
    """Batch id -> the first offset of ``partition`` it read (batches that read some)."""
    out: dict[int, int] = {}
    for bid, rows in sink.batches:
        offsets = [r.offset for r in rows if r.partition == partition]
        if offsets:
            out[bid] = min(offsets)
    return out


class Reports:
    """A LagListener callback that keeps every report."""

    def __init__(self) -> None:
        self.reports: list[LagReport] = []
        self.lock = threading.Lock()

    def __call__(self, report: LagReport) -> None:
        with self.lock:
            self.reports.append(report)

    def lost(self, query_id: str) -> list[tuple[int, dict[TopicPartition, int]]]:
        with self.lock:
            return [
                (r.batch_id, dict(r.lost))
                for r in self.reports
                if r.query_id == query_id and r.lost
            ]

    def batches(self, query_id: str) -> set[int]:
        with self.lock:
            return {r.batch_id for r in self.reports if r.query_id == query_id}


def _delete_at(batch: int, delete: Callable[[], None]) -> Callable[[int], None]:
    def hook(batch_id: int) -> None:
        if batch_id == batch:
            delete()

    return hook


def _still_there(produced: list[Record], lost: range) -> list[Record]:
    return [r for r in produced if not (r.partition == 0 and r.offset in lost)]


def _run_to_the_end(
    spark: Any, query_factory: Callable[[], Any], sink: Collector, checkpoint: Any
) -> tuple[str, Reports]:
    """Run the query with a LagListener until both partitions are read to their end and the
    last batch's progress is reported; returns the query id and the reports."""
    reports = Reports()
    listener = LagListener(callback=reports)
    spark.streams.addListener(listener)
    try:
        query = query_factory()
        wait_for(
            lambda: all(PER_PARTITION - 1 in _offsets(sink, p) for p in (0, 1)),
            query,
            90,
            "both partitions read to their end",
        )
        last = max(commit_ids(checkpoint))
        wait_until(lambda: last in reports.batches(str(query.id)), 30, "the last batch's report")
        time.sleep(1)  # a duplicate or a stray batch would land now
        assert query.isActive and query.exception() is None
        query.stop()
    finally:
        spark.streams.removeListener(listener)
    return str(query.id), reports


def test_records_deleted_between_batches_are_skipped_in_one_step_and_reported_once(
    spark, mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=2)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all(range(2), PER_PARTITION)
    produced = producer.flush()
    checkpoint = tmp_path / "ck"
    sink = HookedCollector(
        after=_delete_at(FAULT_BATCH, lambda: mock_cluster.delete_records(topic, 0, DELETED_BEFORE))
    )
    df = mock_stream(topic, failOnDataLoss="false", **SLOW)
    query_id, reports = _run_to_the_end(
        spark, lambda: queries(start(df, sink, str(checkpoint))), sink, checkpoint
    )

    log = read_offset_log(checkpoint)
    position = log[FAULT_BATCH][topic]["0"]  # where partition 0 stood when its records went
    assert 0 < position < DELETED_BEFORE
    assert sink.keys() == expected_keys(_still_there(produced, range(position, DELETED_BEFORE)))
    # One step: the very next batch reads partition 0 from the new log start, as many offsets
    # as the limit allows (no empty batches crawling through the gap).
    assert _first_offsets(sink, 0)[FAULT_BATCH + 1] == DELETED_BEFORE
    assert log[FAULT_BATCH + 1][topic]["0"] > DELETED_BEFORE
    # Reported once, with the batch that skipped it.
    assert reports.lost(query_id) == [
        (FAULT_BATCH + 1, {TopicPartition(topic, 0): DELETED_BEFORE - position})
    ]
    assert sink.mismatches == []


def test_records_deleted_while_a_batch_reads_them_are_skipped_and_reported_once(
    spark, mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=2)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all(range(2), PER_PARTITION)
    produced = producer.flush()
    checkpoint = tmp_path / "ck"
    # The batch is planned (on the driver, the records exist), then they are deleted before its
    # executors read them. Without the consumer pool no executor has them prefetched: each
    # meets OFFSET_OUT_OF_RANGE.
    sink = HookedCollector(
        before=_delete_at(
            FAULT_BATCH, lambda: mock_cluster.delete_records(topic, 0, DELETED_BEFORE)
        )
    )
    df = mock_stream(topic, failOnDataLoss="false", **{"consumerCache.enabled": "false"}, **SLOW)
    query_id, reports = _run_to_the_end(
        spark, lambda: queries(start(df, sink, str(checkpoint))), sink, checkpoint
    )

    log = read_offset_log(checkpoint)
    position = log[FAULT_BATCH - 1][topic]["0"]  # where the faulty batch started
    assert 0 < position < DELETED_BEFORE
    assert sink.keys() == expected_keys(_still_there(produced, range(position, DELETED_BEFORE)))
    assert _first_offsets(sink, 0)[FAULT_BATCH + 1] == DELETED_BEFORE
    # Every lost offset is reported, once: the ones the executors skipped (with the batch
    # that skipped them) and the ones the next batch's planning skipped.
    assert reports.lost(query_id) == [
        (FAULT_BATCH, {TopicPartition(topic, 0): log[FAULT_BATCH][topic]["0"] - position}),
        (
            FAULT_BATCH + 1,
            {TopicPartition(topic, 0): DELETED_BEFORE - log[FAULT_BATCH][topic]["0"]},
        ),
    ]
    assert sink.mismatches == []


def test_records_deleted_between_batches_fail_the_query_with_data_loss_error(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=1)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all([0], PER_PARTITION)
    produced = producer.flush()
    checkpoint = tmp_path / "ck"
    sink = HookedCollector(
        after=_delete_at(FAULT_BATCH, lambda: mock_cluster.delete_records(topic, 0, DELETED_BEFORE))
    )
    query = queries(start(mock_stream(topic, **SLOW), sink, str(checkpoint)))
    wait_until(lambda: query.exception() is not None, 90, "the query to fail")

    message = str(query.exception())
    position = read_offset_log(checkpoint)[FAULT_BATCH][topic]["0"]
    assert "DataLossError" in message and f"Data loss on {topic}-0" in message
    assert (
        f"offset {position} was expected but the earliest available is {DELETED_BEFORE}" in message
    )
    assert "failOnDataLoss" in message
    # Found on the driver before any task ran: the sink saw the batches before the deletion,
    # each record once, and nothing of the batch that failed.
    assert sorted(bid for bid, _ in sink.batches) == list(range(FAULT_BATCH + 1))
    assert sink.keys() == expected_keys([r for r in produced if r.offset < position])
    assert sink.mismatches == []


def test_regression_prefetched_records_outlive_a_deletion(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=1)
    producer = KnownProducer(mock_cluster.bootstrap_servers, topic)
    producer.send_all([0], PER_PARTITION)
    produced = producer.flush()
    checkpoint = tmp_path / "ck"
    sink = Collector()
    # The executors' pooled consumers must outlive the restart below: no short pool timeout.
    pooled = {**SLOW, "consumerCache.timeoutMs": "300000"}
    query = queries(start(mock_stream(topic, **pooled), sink, str(checkpoint)))
    # The executors' pooled consumers prefetch far past what each batch reads.
    wait_for(lambda: len(sink.batches) >= 3, query, 90, "a few batches")
    query.stop()
    # What the sink holds now: every committed batch, and possibly the batch a stop under load
    # caught after the sink took it but before Spark wrote its commit (foreachBatch is
    # at-least-once). Nothing may arrive after the deletion below.
    before_deletion = sink.keys()
    log = read_offset_log(checkpoint)
    position = max(o[topic]["0"] for o in log.values())
    assert position <= PER_PARTITION - 30
    deleted_before = position + 20
    mock_cluster.delete_records(topic, 0, deleted_before)

    # The same session, so the same Python workers, with the same pooled consumers.
    query = queries(start(mock_stream(topic, **pooled), sink, str(checkpoint)))
    wait_until(lambda: query.exception() is not None, 60, "the restarted query to fail")
    message = str(query.exception())
    assert "DataLossError" in message and f"Data loss on {topic}-0" in message
    assert f"the earliest available is {deleted_before}" in message
    committed = max(commit_ids(checkpoint))
    # The regression: pooled consumers handed on prefetched records of the deleted range.
    assert sink.keys() == before_deletion
    delivered = {log[committed][topic]["0"], position}  # the last batch's output, or not
    assert any(
        before_deletion == expected_keys([r for r in produced if r.offset < end])
        for end in delivered
    ), "the sink's records before the deletion are not a prefix of what was produced"
