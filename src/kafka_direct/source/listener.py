"""How far behind a streaming query is, from Spark's progress events. Runs in the Spark driver
(the user's process, where PySpark delivers listener events).

Python data sources cannot publish custom source metrics, so Spark's Kafka "offsets behind
latest" metrics do not exist for us. Our stream reader does implement ``reportLatestOffset``, so
each progress event carries both the batch's ``endOffset`` and the topic's ``latestOffset``;
:class:`LagListener` turns those into per-partition lag and min/avg/max per query, and hands it
to logging or to a callback (for example a Prometheus gauge).

Each report also says what the batch lost (``failOnDataLoss=false``): offsets deleted before
the batch read them, per partition, from the stream reader's journal
(:mod:`kafka_direct.source.loss_journal`), matched to the batch by its start offsets.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from kafka_direct.offsets import PartitionOffsets, TopicPartition, offsets_from_json
from kafka_direct.source.loss_journal import JournalEntry, JournalReader

__all__ = ["LagListener", "LagReport", "offsets_behind_latest"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LagReport:
    """Offsets behind latest after one micro-batch of one query (kafka_direct sources only)."""

    query_id: str
    query_name: str | None
    batch_id: int
    per_partition: Mapping[TopicPartition, int]
    #: Offsets this batch skipped because they were deleted before it read them
    #: (``failOnDataLoss=false``); empty when nothing was lost.
    lost: Mapping[TopicPartition, int] = field(default_factory=dict)

    @property
    def min(self) -> int:
        return min(self.per_partition.values(), default=0)

    @property
    def max(self) -> int:
        return max(self.per_partition.values(), default=0)

    @property
    def avg(self) -> float:
        values = list(self.per_partition.values())
        return sum(values) / len(values) if values else 0.0

    @property
    def total(self) -> int:
        return sum(self.per_partition.values())


def _parse(raw: str | None) -> PartitionOffsets | None:
    if not raw:
        return None
    try:
        return offsets_from_json(json.loads(raw), "progress offset")
    except (ValueError, TypeError):
        return None  # not a Kafka-shaped offset: another kind of source


def offsets_behind_latest(end_offset: str | None, latest_offset: str | None) -> PartitionOffsets:
    """Per-partition ``latest - end`` from a progress event's JSON strings ({} when unknown).

    Partitions at a -1 placeholder (the first batch of a ``latest`` query) are left out.
    """
    end, latest = _parse(end_offset), _parse(latest_offset)
    if end is None or latest is None:
        return {}
    return {
        tp: max(0, latest[tp] - off) for tp, off in sorted(end.items()) if tp in latest and off >= 0
    }


class LagListener(StreamingQueryListener):
    """Reports offsets behind latest after every micro-batch::

        spark.streams.addListener(LagListener(callback=lambda r: gauge.set(r.max)))

    Without a callback, each report is logged at INFO on ``kafka_direct.source.listener``.
    """

    #: Journal entries no progress event has claimed yet are kept this long (another query's).
    PENDING_S = 600.0
    SEEN_MAX = 10_000

    def __init__(
        self,
        callback: Callable[[LagReport], Any] | None = None,
        journal: JournalReader | None = None,
    ) -> None:
        self.callback = callback
        self.last: dict[str, LagReport] = {}
        self._journal = journal or JournalReader()
        self._pending: list[JournalEntry] = []
        #: Entries seen (insertion-ordered, bounded): a retried task journals its skip again.
        self._seen: dict[tuple[TopicPartition, int, int | None], None] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self.last.pop(str(event.id), None)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        per_partition: dict[TopicPartition, int] = {}
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        for source in progress.sources:
            per_partition.update(offsets_behind_latest(source.endOffset, source.latestOffset))
            starts.update(_parse(source.startOffset) or {})
            ends.update(_parse(source.endOffset) or {})
        if not per_partition:
            return
        lost = self._lost(starts, ends)
        report = LagReport(str(progress.id), progress.name, progress.batchId, per_partition, lost)
        self.last[report.query_id] = report
        if self.callback is not None:
            self.callback(report)
        else:
            log.info(
                "Query %s batch %d: offsets behind latest min=%d avg=%.1f max=%d",
                report.query_name or report.query_id,
                report.batch_id,
                report.min,
                report.avg,
                report.max,
            )
            if report.lost:
                log.warning(
                    "Query %s batch %d lost offsets deleted before it read them: %s",
                    report.query_name or report.query_id,
                    report.batch_id,
                    {str(tp): n for tp, n in sorted(report.lost.items())},
                )

    def _lost(
        self, starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """The journal's entries for the batch ``[starts, ends)``; taken off the list.

        The planner's entries name the batch's start (0 for a partition new in the batch); an
        executor's, the first offset it skipped inside the batch. A retried task skips the same
        offsets again: counted once.
        """
        for entry in self._journal.new_entries():
            key = (entry.topic_partition, entry.expected, entry.available)
            if key not in self._seen:
                self._seen[key] = None
                self._pending.append(entry)
        while len(self._seen) > self.SEEN_MAX:
            del self._seen[next(iter(self._seen))]
        cutoff = time.time() - self.PENDING_S
        lost: dict[TopicPartition, int] = {}
        keep: list[JournalEntry] = []
        for entry in self._pending:
            tp = entry.topic_partition
            # A partition new in this batch is in its end only; Spark reads it from offset 0,
            # which the planner's entry for it names (an added partition starting later, one
            # deleted again).
            start = starts.get(tp, 0 if tp in ends else None)
            if start is not None and (
                start == entry.expected or start <= entry.expected < ends.get(tp, start)
            ):
                lost[tp] = lost.get(tp, 0) + entry.lost
            elif entry.time >= cutoff:
                keep.append(entry)
        self._pending = keep
        return lost
