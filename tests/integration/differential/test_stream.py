"""Streams: Trigger.AvailableNow with maxOffsetsPerTrigger on partitions of uneven sizes, through
both formats. The offset logs of the two checkpoints must hold the same end offsets batch by
batch: this is what makes a checkpoint portable between them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.differential.both import JVM, OURS, new_name, produce, reader, varied

from kafka_direct.testing.broker import create_topic


def offset_log(checkpoint: Path) -> list[dict[str, Any]]:
    """The source offsets of every batch in a checkpoint's offset log, in batch order.

    Each file is ``v1``, the batch metadata, then one line per source (its offset JSON)."""
    files = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    batches = sorted(files, key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[2]) for p in batches]


def run_available_now(
    spark: Any, fmt: str, bootstrap: str, options: dict[str, str], checkpoint: Path, sink: str
) -> list[int]:
    """Run the query to its end; return the row count of each micro-batch."""
    counts: list[int] = []
    df = reader(spark, fmt, bootstrap, options, stream=True).load()
    writer = df.writeStream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if sink == "noop":
        writer = writer.format("noop")
    else:
        writer = writer.foreachBatch(lambda batch, _id: counts.append(batch.count()))
    query = writer.start()
    try:
        assert query.awaitTermination(300), f"{fmt} stream did not finish in 300 s"
    finally:
        query.stop()
    assert query.exception() is None
    return counts


CASES = {
    "one topic, uneven partitions": ((40, 9, 1), "10", "noop"),
    "limit below the partition count": ((5, 3, 2), "2", "noop"),
    "limit above the backlog": ((7, 0, 3), "100", "noop"),
    "foreachBatch": ((23, 11, 4), "7", "foreachBatch"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_end_offsets_per_micro_batch(
    case: str, spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    sizes, limit, sink = CASES[case]
    topic = new_name("diff-stream")
    create_topic(kafka_bootstrap, topic, partitions=len(sizes))
    produce(kafka_bootstrap, topic, [r for p, n in enumerate(sizes) for r in varied(p, n, topic)])
    options = {"subscribe": topic, "startingOffsets": "earliest", "maxOffsetsPerTrigger": limit}
    logs = {}
    counts = {}
    for fmt in (JVM, OURS):
        checkpoint = tmp_path / fmt
        counts[fmt] = run_available_now(spark, fmt, kafka_bootstrap, options, checkpoint, sink)
        logs[fmt] = offset_log(checkpoint)
    print(f"{case}: format('kafka') {logs[JVM]}\n  format('kafka_direct') {logs[OURS]}")
    assert logs[JVM][-1] == {topic: {str(p): n for p, n in enumerate(sizes)}}
    assert logs[OURS] == logs[JVM]
    assert counts[OURS] == counts[JVM]
