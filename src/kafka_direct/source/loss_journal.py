"""Data loss found by stream readers, handed to listeners. Runs in the Spark driver's stream
runner (the Python process Spark starts for a streaming source) and in executors (offsets a
task skipped because they were deleted after the batch was planned), which write it; read by
:class:`kafka_direct.source.listener.LagListener` in the user's process.

A Python data source cannot publish custom metrics, and its offsets must stay Spark's offsets, so
there is no channel through Spark's progress events for "this batch skipped 500 offsets that
were deleted before it read them". Both processes run on the driver's host, though, so the runner
appends one JSON line per new loss to a file of its own under :func:`journal_dir`, and the
listener reads what is new at each progress event. An entry names the partition and the first
offset lost: the planner's is the batch's ``startOffset`` in the progress event, an executor's
lies inside the batch's ``[startOffset, endOffset)``; that is how the listener attributes it to
a query and a batch. Executors on other hosts write to their own host's journal, which no
listener reads: there the skip is only in the executor's log (as with Spark's connector, whose
executors only log it).

Writing never fails a query: a loss is always logged by the planner, and the journal is an extra.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.data_loss import DataLoss

__all__ = [
    "JOURNAL_DIR_ENV",
    "JournalEntry",
    "JournalReader",
    "journal_dir",
    "record",
    "record_skip",
]

log = logging.getLogger(__name__)

#: Environment variable naming the journal's directory (default: a per-user temporary one).
JOURNAL_DIR_ENV = "KAFKA_DIRECT_STATE_DIR"

#: Files of processes that ended long ago are removed when a new one is opened.
_KEEP_S = 7 * 24 * 3600


def journal_dir() -> Path:
    configured = os.environ.get(JOURNAL_DIR_ENV)
    if configured:
        return Path(configured)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"kafka_direct-{uid}"


@dataclass(frozen=True)
class JournalEntry:
    """One loss: ``lost`` offsets of ``topic_partition``, in the batch that started at
    ``expected`` (an upper bound on records; 0 when Kafka cannot tell, e.g. a deleted topic)."""

    topic_partition: TopicPartition
    kind: str
    expected: int
    available: int | None
    lost: int
    time: float


def _path() -> Path:
    return journal_dir() / f"data-loss-{os.getpid()}.jsonl"


def record(loss: DataLoss, lost: int) -> None:
    """Append ``loss`` to this process's journal (see the module docstring)."""
    line = json.dumps(
        {
            "topic": loss.topic_partition.topic,
            "partition": loss.topic_partition.partition,
            "kind": loss.kind,
            "expected": loss.expected_offset,
            "available": loss.available_offset,
            "lost": lost,
            "time": time.time(),
        },
        separators=(",", ":"),
    )
    path = _path()
    try:
        fresh = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
        if fresh:
            _prune(path.parent)
    except OSError as exc:
        log.info("Could not record data loss in %s: %s", path, exc)


def record_skip(rng: OffsetRange, first_lost: int, resume: int) -> None:
    """Append what an executor skipped of ``rng``: ``[first_lost, resume)`` was deleted after
    the batch was planned (see :func:`kafka_direct.consumer.fetch.fetch_range`)."""
    detail = f"offsets [{first_lost}, {resume}) were deleted before the task read them"
    loss = DataLoss(rng.topic_partition, "offset_out_of_range", first_lost, resume, detail)
    record(loss, resume - first_lost)


def _prune(folder: Path) -> None:
    cutoff = time.time() - _KEEP_S
    for old in folder.glob("data-loss-*.jsonl"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass


class JournalReader:
    """Reads what the journal's files gained since the last call (one reader per listener)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._positions: dict[Path, int] = {}

    def new_entries(self) -> list[JournalEntry]:
        folder = self.folder or journal_dir()
        entries: list[JournalEntry] = []
        for path in sorted(folder.glob("data-loss-*.jsonl")):
            try:
                with open(path, encoding="utf-8") as src:
                    src.seek(self._positions.get(path, 0))
                    text = src.read()
            except OSError:
                continue
            whole = text[: text.rfind("\n") + 1]  # a line being written is read next time
            self._positions[path] = self._positions.get(path, 0) + len(whole.encode("utf-8"))
            entries += [e for e in map(_parse, whole.splitlines()) if e is not None]
        return entries


def _parse(line: str) -> JournalEntry | None:
    try:
        raw = json.loads(line)
        return JournalEntry(
            TopicPartition(str(raw["topic"]), int(raw["partition"])),
            str(raw["kind"]),
            int(raw["expected"]),
            None if raw["available"] is None else int(raw["available"]),
            int(raw["lost"]),
            float(raw["time"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
