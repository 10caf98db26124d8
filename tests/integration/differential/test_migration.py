"""Migration: a streaming query's checkpoint goes from format("kafka") to format("kafka_direct")
and back, with records produced while it was stopped. Nothing is read twice, nothing skipped.

Spark does not tie a checkpoint to a source's format name: on restart it hands the source the
offset JSON of the last batch, so the two sources need the same offset JSON (they do:
``{"topic": {"partition": next offset}}``) and the same end offsets per batch (see
test_stream.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.integration.differential.both import JVM, OURS, Sent, new_name, produce, reader

from kafka_direct.testing.broker import create_topic


def run_once(
    spark: Any, fmt: str, bootstrap: str, topic: str, checkpoint: Path, limit: str | None
) -> list[tuple[int, int, bytes]]:
    """Run the query under Trigger.AvailableNow on ``checkpoint``; return what it read."""
    seen: list[tuple[int, int, bytes]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend((r.partition, r.offset, bytes(r.value)) for r in batch.collect())

    options = {"subscribe": topic, "startingOffsets": "earliest"}
    if limit:
        options["maxOffsetsPerTrigger"] = limit
    df = reader(spark, fmt, bootstrap, options, stream=True).load()
    query = (
        df.writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .foreachBatch(collect)
        .start()
    )
    try:
        assert query.awaitTermination(300), f"{fmt} query did not finish in 300 s"
    finally:
        query.stop()
    assert query.exception() is None
    return sorted(seen)


def batch_of(topic: str, n: int, start: int) -> list[Sent]:
    return [Sent(i % 2, f"k{i}".encode(), f"{topic}|{i}".encode()) for i in range(start, start + n)]


@pytest.mark.parametrize("limit", [None, "7"], ids=["all available", "maxOffsetsPerTrigger"])
@pytest.mark.parametrize("first", [JVM, OURS])
def test_switch_formats_on_one_checkpoint(
    first: str, limit: str | None, spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    second = OURS if first == JVM else JVM
    topic = new_name("diff-migrate")
    create_topic(kafka_bootstrap, topic, partitions=2)
    checkpoint = tmp_path / "checkpoint"
    produced: list[bytes] = []
    read: list[list[tuple[int, int, bytes]]] = []
    for step, fmt in enumerate((first, second, first)):
        records = batch_of(topic, 20 + step, len(produced))
        produce(kafka_bootstrap, topic, records)
        produced += [r.value for r in records if r.value is not None]
        read.append(run_once(spark, fmt, kafka_bootstrap, topic, checkpoint, limit))
    values = [[v for _p, _o, v in step] for step in read]
    assert [len(v) for v in values] == [20, 21, 22]
    assert sorted(v for step in values for v in step) == sorted(produced)
    for step, fmt in enumerate((first, second, first)):
        begin = sum(len(v) for v in values[:step])
        assert sorted(values[step]) == sorted(produced[begin : begin + len(values[step])]), fmt
