"""Plan batch reads and micro-batches into offset ranges. Runs in the Spark driver (the Python
planner and stream-runner processes); pure apart from the injected offset reader.

This is ``DirectKafkaInputDStream.compute`` / ``KafkaMicroBatchStream`` in Python:

- ``initial_offsets``: where a new query starts. ``latest`` is kept as -1 placeholders, which the
  first trigger pins to concrete offsets in an empty first micro-batch. Spark's own source stores
  its initial offsets in a side file of the checkpoint; a Python source cannot reach the
  checkpoint, and re-resolving "latest" after a crash in batch 0 would skip or re-read records.
- ``latest_offsets``: discovery (new topics and partitions, which start at earliest), the
  ``Trigger.AvailableNow`` target, ``minOffsetsPerTrigger``/``maxTriggerDelay`` and the rate
  limits.
- ``plan_ranges``: one range per partition, data-loss checks, then splitting. It depends only on
  its arguments and the cluster's earliest offsets (for new or reset partitions), so a replayed
  micro-batch reads the same ranges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kafka_direct.errors import TopicNotFoundError
from kafka_direct.offsets import LATEST, OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.options import SourceOptions, Strategy
from kafka_direct.planning import (
    DataLoss,
    apply_data_loss_policy,
    min_offsets_gate,
    rate_limit,
    resolve_new_partitions,
    split_ranges,
)
from kafka_direct.positions import (
    OffsetReader,
    check_range_order,
    resolve_ending,
    resolve_starting,
)

__all__ = ["StreamPlanner", "plan_batch"]

log = logging.getLogger(__name__)

#: Starting positions that depend on when they are resolved. They are kept as -1 placeholders
#: until the first trigger pins them in an empty batch 0, which Spark's offset log then records.
_PINNED_KINDS = ("latest", "committed", "timestamp", "by_timestamp")


def _now_ms() -> int:
    return int(time.time() * 1000)


def plan_batch(opts: SourceOptions, reader: OffsetReader) -> list[OffsetRange]:
    """Ranges of a batch read (``spark.read``): starting to ending offsets, split."""
    tps = reader.partitions(opts.strategy)
    if opts.strategy.kind == "subscribe":
        missing = sorted(set(opts.strategy.topics) - {tp.topic for tp in tps})
        if missing:
            # Spark would return an empty batch; a missing topic in a bounded read is almost
            # always a typo, so say so instead of returning nothing.
            raise TopicNotFoundError(
                f"Option 'subscribe' names topic(s) {', '.join(missing)}, which the cluster does "
                "not have. Create them first or fix the topic names."
            )
    assert opts.ending is not None
    start = resolve_starting(
        opts.starting,
        tps,
        reader,
        timestamp_strategy=opts.timestamp_strategy,
        fail_on_data_loss=opts.fail_on_data_loss,
        group=opts.group,
        committed_fallback=opts.committed_fallback,
    )
    end = resolve_ending(opts.ending, tps, reader)
    check_range_order(start, end)
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(start)]
    return split_ranges(
        ranges,
        min_partitions=opts.min_partitions,
        max_records_per_partition=opts.max_records_per_partition,
    )


class StreamPlanner:
    """The micro-batch planner behind the stream reader. Keeps state between triggers."""

    def __init__(
        self,
        opts: SourceOptions,
        reader_factory: Callable[[], OffsetReader],
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.opts = opts
        self._reader_factory = reader_factory
        self._reader: OffsetReader | None = None
        self._clock_ms = clock_ms
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None
        self._pinned: PartitionOffsets = {}
        self._initial: PartitionOffsets | None = None
        # Spark starts lastTriggerMillis at 0, so the first batch never waits for the minimum.
        self._last_trigger_ms = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        return state

    @property
    def reader(self) -> OffsetReader:
        if self._reader is None:
            self._reader = self._reader_factory()
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def reported_latest(self) -> PartitionOffsets | None:
        """Latest offsets seen by the last trigger (for ``reportLatestOffset``)."""
        return self._latest

    def _current_partitions(self, *, strict: bool = True) -> set[TopicPartition]:
        strategy = self.opts.strategy
        if strategy.kind == "assign" and not strict:
            # Once running, an assigned partition that vanished is data loss (failOnDataLoss
            # decides, in plan_ranges), not a reason to fail every trigger as an unknown topic.
            topics = tuple(sorted({tp.topic for tp in strategy.partitions}))
            existing = self.reader.partitions(Strategy("subscribe", topics=topics))
            return existing & set(strategy.partitions)
        tps = self.reader.partitions(strategy)
        if not tps:
            log.warning("No partitions match %s yet; waiting", self.opts.strategy.describe())
        return tps

    def initial_offsets(self) -> PartitionOffsets:
        # Until batch 0 commits, Spark asks again whenever it needs a start: for latestOffset,
        # then for partitions (MicroBatchExecution.getStartOffset, runBatch). Answer the same,
        # or batch 0 is planned from another start than the one its end was computed from.
        if self._initial is None:
            self._initial = self._resolve_initial_offsets()
        return dict(self._initial)

    @property
    def initial_in_this_run(self) -> PartitionOffsets | None:
        """The initial offsets, if this process resolved them (None after a restart)."""
        return None if self._initial is None else dict(self._initial)

    def _resolve_initial_offsets(self) -> PartitionOffsets:
        tps = self._current_partitions()
        if self._target is not None:
            # Spark fixes the Trigger.AvailableNow target before it asks for initial offsets. A
            # partition created in between belongs to the next run; in this one the target lacks
            # it, so it would look deleted (data loss).
            tps = {tp for tp in tps if tp in self._target}
        spec = self.opts.starting
        if spec.kind in _PINNED_KINDS:
            # Resolved by the first trigger and pinned in an empty batch 0 (see module docs).
            return {tp: LATEST for tp in sorted(tps)}
        resolved = resolve_starting(
            spec,
            tps,
            self.reader,
            timestamp_strategy=self.opts.timestamp_strategy,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            group=self.opts.group,
            committed_fallback=self.opts.committed_fallback,
        )
        if spec.kind == "specific":
            resolved.update({tp: LATEST for tp, off in spec.offsets.items() if off == LATEST})
        return resolved

    def prepare_available_now(self) -> None:
        """Fix the ``Trigger.AvailableNow`` target: everything in the log right now."""
        tps = self._current_partitions()
        self._target = self.reader.latest(tps)
        log.info("Trigger.AvailableNow target: %s", {str(tp): o for tp, o in self._target.items()})

    def latest_offsets(self, start: PartitionOffsets, *, read_all: bool) -> PartitionOffsets:
        """End offsets of the next micro-batch; ``start`` itself when there is nothing to do.

        ``read_all`` is the engine's ``ReadAllAvailable``: ignore the source's own limits.
        """
        if self._target is not None:
            latest = dict(self._target)
        else:
            known = {tp: off for tp, off in start.items() if off != LATEST}
            latest = self.reader.latest(self._current_partitions(strict=False), known=known)
        self._latest = latest
        if any(off == LATEST for off in start.values()):
            # First batch of a query: pin the starting position in an empty batch, so Spark's
            # offset log records it (partitions new since initialOffset are read from earliest
            # by plan_ranges).
            self._pin(start, latest)
            return {
                tp: start[tp] if start.get(tp, LATEST) != LATEST else self._pinned.get(tp, off)
                for tp, off in latest.items()
            }
        base = {tp: off for tp, off in start.items() if tp in latest}
        new = sorted(set(latest) - set(start))
        if new:
            base.update(resolve_new_partitions(start, new, self.reader.earliest(new)))
        reset = [tp for tp, off in base.items() if latest[tp] < off]
        if reset:
            # Offsets went backwards (a recreated topic). plan_ranges reports it; the new log is
            # rate-limited from its start like any other partition.
            base.update(self.reader.earliest(reset))
        limited = not read_all
        # Not under Trigger.AvailableNow: holding back a tail below the minimum would return
        # start before the target is reached, which ends the run with that tail unread.
        if limited and self.opts.min_offsets_per_trigger is not None and self._target is None:
            now = self._clock_ms()
            if not min_offsets_gate(
                base,
                latest,
                min_total=self.opts.min_offsets_per_trigger,
                max_trigger_delay_ms=self.opts.max_trigger_delay_ms,
                last_trigger_ms=self._last_trigger_ms,
                now_ms=now,
            ):
                return start
            # Spark's delayBatch restarts the delay whenever it lets a trigger through, even one
            # that then finds nothing to read.
            self._last_trigger_ms = now
        end = rate_limit(
            base,
            latest,
            max_total=self.opts.max_offsets_per_trigger if limited else None,
            max_per_partition=self.opts.max_offsets_per_partition_per_trigger if limited else None,
        )
        for tp in reset:
            end[tp] = min(end[tp], latest[tp])
        if end != {tp: off for tp, off in start.items() if tp in end} or set(end) != set(start):
            return end
        return start

    def _pin(self, start: PartitionOffsets, latest: PartitionOffsets) -> None:
        """Resolve -1 starts once per run: to the log end, or for starts that depend on when they
        are resolved (committed offsets, timestamps) to what the option says right now."""
        todo = sorted(tp for tp, off in start.items() if off == LATEST and tp in latest)
        todo = [tp for tp in todo if tp not in self._pinned]
        if not todo:
            return
        spec = self.opts.starting
        if spec.kind in ("committed", "timestamp", "by_timestamp"):
            if spec.kind == "by_timestamp":
                spec = replace(spec, offsets={tp: spec.offsets[tp] for tp in todo})
            self._pinned.update(
                resolve_starting(
                    spec,
                    set(todo),
                    self.reader,
                    timestamp_strategy=self.opts.timestamp_strategy,
                    fail_on_data_loss=self.opts.fail_on_data_loss,
                    group=self.opts.group,
                    committed_fallback=self.opts.committed_fallback,
                )
            )
        else:
            self._pinned.update({tp: latest[tp] for tp in todo})
        log.info(
            "Starting offsets pinned in batch 0: %s", {str(tp): self._pinned[tp] for tp in todo}
        )

    def plan_ranges(
        self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
    ) -> list[OffsetRange]:
        """The ranges of micro-batch ``(start, end]``, after the failOnDataLoss policy."""
        new = sorted(set(end) - set(start))
        from_offsets: PartitionOffsets = {}
        if new:
            from_offsets.update(resolve_new_partitions(start, new, self.reader.earliest(new)))
        losses: list[DataLoss] = []
        for tp in sorted(set(start) - set(end)):
            if start[tp] == LATEST:
                # A "latest" placeholder re-resolved after a restart in batch 0 may name a
                # partition the logged end never had: nothing was planned there, nothing is lost.
                continue
            detail = f"{tp} is gone (offset {start[tp]} was expected)"
            losses.append(DataLoss(tp, "partition_gone", start[tp], None, detail))
            from_offsets[tp] = start[tp]
        for tp in sorted(set(start) & set(end)):
            # A -1 start is the pinned first batch of a "latest" query: nothing to read.
            from_offsets[tp] = end[tp] if start[tp] == LATEST else start[tp]
            if end[tp] < from_offsets[tp]:
                losses.append(
                    DataLoss(
                        tp,
                        "offset_reset",
                        from_offsets[tp],
                        end[tp],
                        f"{tp}'s offset was changed from {from_offsets[tp]} to {end[tp]}",
                    )
                )
        if losses:
            reset = [loss.topic_partition for loss in losses if loss.kind == "offset_reset"]
            earliest = self.reader.earliest(reset) if reset else {}
            from_offsets = apply_data_loss_policy(
                losses,
                from_offsets,
                earliest,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                logger=log,
            )
        ranges = [
            OffsetRange(tp.topic, tp.partition, from_offsets[tp], max(from_offsets[tp], end[tp]))
            for tp in sorted(from_offsets)
            if tp in end
        ]
        return split_ranges(
            ranges,
            min_partitions=self.opts.min_partitions,
            max_records_per_partition=self.opts.max_records_per_partition,
        )
