"""The C fast path inside Spark: a read gives the same rows through either path, and each read
takes the path its options ask for (checked from the executors' task statistics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafka_direct.consumer import native
from tests.integration.kafka_helpers import produce_known
from tests.integration.test_batch_read import rows_as_records


def _paths_used(stats_dir: Path, topic: str) -> list[bool]:
    """``fast_path`` of every finished task that read ``topic`` (sorted: workers write apart)."""
    used = []
    for path in sorted(stats_dir.glob("tasks-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["topic"] == topic and record["outcome"] == "ok":
                used.append(record["fast_path"])
    return sorted(used)


def test_the_fast_path_is_built_in_this_environment() -> None:
    # Without it every test here would read through Python only; the build must not fail quietly.
    assert native.available(), native.status()


def test_batch_read_gives_the_same_rows_through_either_path(
    make_topic: Any, reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=300, partitions=2)

    fast = rows_as_records(reader(subscribe=topic).load())
    assert _paths_used(task_stats_dir, topic) == [True, True]
    python = rows_as_records(reader(subscribe=topic, **{"fastPath.enabled": "false"}).load())
    assert _paths_used(task_stats_dir, topic) == [False, False, True, True]

    assert fast == produced  # null keys (every 7th), values, offsets, partitions, timestamps
    assert python == produced


def test_small_arrow_batches_and_split_ranges_through_the_fast_path(
    make_topic: Any, reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = make_topic(partitions=1)
    produced = produce_known(kafka_bootstrap, topic, per_partition=500)

    df = reader(subscribe=topic, arrowBatchSize="7", minPartitions="4").load()

    assert df.rdd.getNumPartitions() == 4
    assert rows_as_records(df) == produced
    assert _paths_used(task_stats_dir, topic) == [True] * 4


def test_headers_through_either_path(
    make_topic: Any, reader: Any, kafka_bootstrap: str, task_stats_dir: Path
) -> None:
    topic = make_topic()
    produced = produce_known(kafka_bootstrap, topic, per_partition=20, headers=True)

    fast = rows_as_records(reader(subscribe=topic, includeHeaders="true").load())
    python = rows_as_records(
        reader(subscribe=topic, includeHeaders="true", **{"fastPath.enabled": "false"}).load()
    )

    assert fast == produced  # every header, including null-valued ones
    assert python == produced
    assert _paths_used(task_stats_dir, topic) == [False, True]
