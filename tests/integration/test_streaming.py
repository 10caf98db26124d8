"""Streaming reads (`spark.readStream.format("kafka_direct")`) into foreachBatch: exact output,
restart from checkpoint, Trigger.AvailableNow and admission control, on the real broker."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.kafka_helpers import create_topic, delete_topic, produce_known
from tests.integration.streams import Collector, expected_keys, start, wait_for


@pytest.mark.tansu_smoke
def test_exact_output_then_restart_from_checkpoint_loses_and_repeats_nothing(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    first = produce_known(kafka_bootstrap, topic, per_partition=30, partitions=2)
    checkpoint = str(tmp_path / "ck")
    sink = Collector()
    df = reader(stream=True, subscribe=topic, startingOffsets="earliest").load()

    query = start(df, sink, checkpoint)
    wait_for(lambda: len(sink.rows) >= 60, query, what="the first 60 records")
    query.stop()
    assert sink.keys() == expected_keys(first)

    second = produce_known(kafka_bootstrap, topic, per_partition=20, partitions=2, start_index=30)
    query = start(df, sink, checkpoint)
    wait_for(lambda: len(sink.rows) >= 100, query, what="all 100 records after restart")
    time.sleep(1.5)  # give a wrongly re-read batch the chance to show up
    query.stop()
    assert sink.keys() == expected_keys(first + second)  # no loss, no duplicate
    assert sink.mismatches == []  # a batch Spark re-ran after the stop read the same records


def test_available_now_reads_exactly_the_backlog_and_stops(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=40, partitions=2)
    sink = Collector()
    df = reader(stream=True, subscribe=topic, startingOffsets="earliest").load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sink.keys() == expected_keys(produced)


def test_max_offsets_per_trigger_gives_exact_batch_sizes(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=100, partitions=2)
    sink = Collector()
    df = reader(
        stream=True, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="30"
    ).load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(180)
    assert sink.sizes == [30] * 6 + [20]
    assert sink.keys() == expected_keys(produced)


def test_per_partition_cap_limits_each_partition(make_topic, reader, kafka_bootstrap, tmp_path):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=35, partitions=2)
    sink = Collector()
    df = reader(
        stream=True,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerPartitionPerTrigger="10",
    ).load()
    query = start(df, sink, str(tmp_path / "ck"), availableNow=True)
    assert query.awaitTermination(180)
    per_batch = [Counter(r.partition for r in rows) for _, rows in sink.batches]
    assert per_batch == [Counter({0: 10, 1: 10})] * 3 + [Counter({0: 5, 1: 5})]
    assert sink.keys() == expected_keys(produced)


def test_min_offsets_per_trigger_waits_for_the_minimum_or_the_delay(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=1)
    first = produce_known(kafka_bootstrap, topic, per_partition=10)
    sink = Collector()
    df = reader(
        stream=True,
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="50",
        maxTriggerDelay="6s",
    ).load()
    query = start(df, sink, str(tmp_path / "ck"))
    # As in Spark, the first batch does not wait for the minimum.
    wait_for(lambda: len(sink.rows) == 10, query, what="the first batch")
    assert sink.sizes[-1] == 10
    batches_before = len(sink.sizes)

    second = produce_known(kafka_bootstrap, topic, per_partition=20, start_index=10)
    time.sleep(2.0)  # well below maxTriggerDelay: 20 < 50 records must not trigger a batch
    assert [s for s in sink.sizes[batches_before:] if s] == []
    wait_for(lambda: len(sink.rows) == 30, query, what="the delayed batch")
    assert [s for s in sink.sizes[batches_before:] if s] == [20]

    third = produce_known(kafka_bootstrap, topic, per_partition=60, start_index=30)
    wait_for(lambda: len(sink.rows) == 90, query, what="the last records")
    query.stop()
    assert sink.keys() == expected_keys(first + second + third)


def test_starting_offsets_latest_skips_the_past_and_reads_the_future(
    make_topic, reader, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produce_known(kafka_bootstrap, topic, per_partition=10, partitions=2)
    sink = Collector()
    df = reader(stream=True, subscribe=topic, startingOffsets="latest").load()
    query = start(df, sink, str(tmp_path / "ck"))
    # The first batch pins the starting position; it is empty.
    wait_for(lambda: len(sink.batches) >= 1, query, what="the pinning batch")
    assert sink.rows == []
    future = produce_known(kafka_bootstrap, topic, per_partition=15, partitions=2, start_index=10)
    wait_for(lambda: len(sink.rows) >= 30, query, what="the new records")
    query.stop()
    assert sink.keys() == expected_keys(future)


def _stopped_in_a_batch(sink: Collector, stop_when: Callable[[Any, int], bool]) -> Any:
    """A foreachBatch function that fails the batch ``stop_when`` picks (the driver stops
    mid-batch: the batch is in the offset log, its commit is not), else hands it to ``sink``."""

    def run(df: Any, batch_id: int) -> None:
        if stop_when(df, batch_id):
            raise RuntimeError("the driver stops mid-batch")
        sink(df, batch_id)

    return run


def _fails_mid_batch(query: Any) -> None:
    with pytest.raises(Exception, match="the driver stops mid-batch"):
        query.awaitTermination(90)


@pytest.mark.parametrize("starting", ["earliest", "json"])
def test_restart_in_batch_0_after_a_matching_topic_was_created_replays_batch_0(
    reader, kafka_bootstrap, tmp_path, starting
):
    # Regression (review): the restart resolved the start again with the new topic in it, which
    # the logged batch 0 lacks: "b-0 is gone" (earliest) or "no entry for b-0" (JSON) on every
    # restart. Spark keeps batch 0's start in its checkpoint; the new topic is read from earliest.
    prefix = f"b0-{uuid.uuid4().hex[:8]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(kafka_bootstrap, first, partitions=1)
    records = produce_known(kafka_bootstrap, first, per_partition=5)
    spec = "earliest" if starting == "earliest" else json.dumps({first: {"0": 0}})
    df = reader(stream=True, subscribePattern=f"{prefix}-.*", startingOffsets=spec).load()
    checkpoint = str(tmp_path / "ck")
    sink = Collector()
    _fails_mid_batch(start(df, _stopped_in_a_batch(sink, lambda _df, b: b == 0), checkpoint))
    create_topic(kafka_bootstrap, second, partitions=1)
    records += produce_known(kafka_bootstrap, second, per_partition=3)
    records += produce_known(kafka_bootstrap, first, per_partition=2, start_index=5)

    query = start(df, sink, checkpoint)
    wait_for(lambda: len(sink.rows) >= 10, query, what="batch 0 replayed, then the new topic")
    query.stop()
    assert sink.keys() == expected_keys(records)
    assert sink.batches[0][0] == 0 and {r.topic for r in sink.batches[0][1]} == {first}


def test_replayed_batch_whose_new_topic_was_deleted_follows_fail_on_data_loss(
    reader, kafka_bootstrap, tmp_path
):
    # Regression (review): the replay waited fetchOffset.unavailableTimeout for the deleted new
    # topic's earliest offset, then failed, on every restart, whatever failOnDataLoss said. Spark
    # reports "Cannot find earliest offsets" through failOnDataLoss. The 30 s bound here makes
    # the old behaviour fail this test within its waits.
    prefix = f"gone-{uuid.uuid4().hex[:8]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(kafka_bootstrap, first, partitions=1)
    records = produce_known(kafka_bootstrap, first, per_partition=5)
    options = {
        "subscribePattern": f"{prefix}-.*",
        "startingOffsets": "earliest",
        "fetchOffset.unavailableTimeout": "30s",
    }
    checkpoint = str(tmp_path / "ck")
    sink = Collector()

    def reads_second(df: Any, _batch_id: int) -> bool:
        return df.filter(df.topic == second).count() > 0

    query = start(reader(stream=True, **options).load(), sink, checkpoint)
    wait_for(lambda: len(sink.rows) >= 5, query, what="the first topic")
    committed = tmp_path / "ck" / "commits" / "0"
    wait_for(committed.exists, query, what="batch 0's commit")
    query.stop()
    # Created while the query is stopped, so that the next batch has it as a new partition.
    create_topic(kafka_bootstrap, second, partitions=1)
    produce_known(kafka_bootstrap, second, per_partition=3)
    query = start(
        reader(stream=True, **options).load(), _stopped_in_a_batch(sink, reads_second), checkpoint
    )
    _fails_mid_batch(query)  # the batch with the new topic is logged, not committed
    delete_topic(kafka_bootstrap, second)

    strict = start(reader(stream=True, **options).load(), sink, checkpoint)
    with pytest.raises(Exception, match=f"Cannot find earliest offsets of {second}-0"):
        strict.awaitTermination(90)

    lenient = reader(stream=True, **options, failOnDataLoss="false").load()
    query = start(lenient, sink, checkpoint)
    records += produce_known(kafka_bootstrap, first, per_partition=4, start_index=5)
    wait_for(lambda: len(sink.rows) >= 9, query, what="the records after the replay")
    query.stop()
    assert sink.keys() == expected_keys(records)


def test_collector_checks_a_replayed_batch_instead_of_adding_it_twice():
    class Frame:
        def __init__(self, offsets):
            self.rows = [
                {"topic": "t", "partition": 0, "offset": o, "key": None, "value": b"v"}
                for o in offsets
            ]

        def select(self, *_cols):
            return self

        def collect(self):
            return self.rows

    sink = Collector()
    sink(Frame([0, 1]), 0)
    sink(Frame([1, 0]), 0)  # Spark's re-run of batch 0: the same records
    sink(Frame([2]), 1)
    sink(Frame([2, 3]), 1)  # a re-run that read more: the source broke its promise
    sink(Frame([0]), 2)  # a record read again under a new batch id: a duplicate
    assert sink.replayed == [0, 1]
    assert sink.mismatches == [1]
    offsets = [key[2] for key in Collector.keys(sink)]
    assert offsets == [0, 0, 1, 2]
