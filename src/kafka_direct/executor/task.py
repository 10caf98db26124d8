"""The running Spark task, and its statistics line. Runs in Spark executors (Python workers).

Read tasks (:mod:`kafka_direct.consumer.read`) and write tasks (:mod:`kafka_direct.producer.write`,
:mod:`kafka_direct.source.sink`) ask the same things of Spark's ``TaskContext``: the task's
partition, its attempt (a reattempt invalidates pooled clients, SPARK-27042) and, for a
streaming write, its micro-batch. Outside a Spark task (a unit test, a user's thread) the answer
is partition -1, attempt 0, no micro-batch.

Task statistics, for benchmarks: when the environment variable ``KAFKA_DIRECT_STATS_DIR``
names a directory in the Python workers' environment, every task appends its JSON lines to
``<dir>/tasks-<pid>.jsonl`` when it ends, in one write (``O_APPEND`` keeps concurrent writers'
lines whole); the stream reader's calls on the driver go to ``driver-<pid>.jsonl``. Once per
task or call, never per record; without the variable nothing is recorded.
``benchmarks/run.py`` reads them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

__all__ = ["STATS_DIR_ENV", "TaskInfo", "append_stats", "stats_dir", "task_info"]

log = logging.getLogger(__name__)

#: Environment variable naming a directory for per-task statistics (see the module docstring).
STATS_DIR_ENV = "KAFKA_DIRECT_STATS_DIR"


class TaskInfo(NamedTuple):
    """What the running Spark task is."""

    partition_id: int
    attempt: int
    #: The micro-batch of a streaming write, or None.
    batch_id: int | None


def task_info() -> TaskInfo:
    """The running Spark task (partition -1, attempt 0 outside one)."""
    # Imported here so that the floor stays importable (and unit-testable) without Spark.
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return TaskInfo(-1, 0, None)
    # Not public, but the only way a stream writer's task learns its micro-batch.
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return TaskInfo(ctx.partitionId(), ctx.attemptNumber(), None if batch is None else int(batch))


def stats_dir() -> str | None:
    """The statistics directory, when this process records task statistics."""
    return os.environ.get(STATS_DIR_ENV) or None


def append_stats(
    directory: str, lines: Sequence[Mapping[str, object]], kind: str = "tasks"
) -> None:
    """Append one task's ``lines`` to this process's statistics file (``<kind>-<pid>.jsonl``:
    ``tasks`` for executors' tasks, ``driver`` for the stream reader's calls); a failure is
    logged."""
    path = os.path.join(directory, f"{kind}-{os.getpid()}.jsonl")
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    except OSError as exc:
        log.warning("Could not write task statistics to %s: %s", path, exc)
