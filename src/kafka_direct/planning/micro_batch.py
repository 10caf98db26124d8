"""The structured source's micro-batch planner: where a query starts, where each micro-batch
ends, and the ranges it reads. Runs in the Spark driver (the stream-runner process); pure apart
from the injected offset reader. Its lookups against the live cluster (partition listing, latest
and earliest offsets, pinned starts, log starts) are in :mod:`kafka_direct.planning.lookups`.

This is ``KafkaMicroBatchStream`` (Spark Streaming's ``DirectKafkaInputDStream.compute``) in Python:

- ``initial_offsets``: where a new query starts. ``latest`` is kept as -1 placeholders, which the
  first trigger pins to concrete offsets in an empty first micro-batch. Spark's own source stores
  its initial offsets in a side file of the checkpoint; a Python source cannot reach the
  checkpoint, and re-resolving "latest" after a crash in batch 0 would skip or re-read records.
  ``earliest`` and JSON starts are resolved again when a restart replays batch 0: partitions
  created since are left to later batches (from earliest), and a JSON start is checked against
  the partitions that exist only at the first trigger of a new query, as Spark checks it once.
- ``latest_offsets``: discovery (new topics and partitions, which start at earliest), the
  ``Trigger.AvailableNow`` target, ``minOffsetsPerTrigger``/``maxTriggerDelay`` and the rate
  limits.
- ``plan_ranges``: one range per partition, data-loss checks, then splitting. It depends only on
  its arguments and the cluster's earliest offsets (for new or reset partitions, and to find
  data deleted before it was read), so a replayed micro-batch reads the same ranges unless the
  data it would read is gone.

Faults (see :mod:`kafka_direct.planning.patience`): an offset the cluster did not answer is
never planned. Such a partition does not advance in this trigger; a new partition without its
earliest offset joins a later micro-batch (under ``Trigger.AvailableNow`` the trigger waits for
it); with no answer at all the trigger plans nothing; the stream fails only after
``fetchOffset.unavailableTimeout``. The trigger that pins batch 0 waits instead (within the same
bound): whatever it answers becomes batch 0's end in Spark's offset log, and a -1 placeholder
must never get there. A checkpoint written by an older version under such a fault may hold an
invalid end offset (librdkafka's -1001): the batch treats that partition as not advanced, and
later triggers start it where it stood (:mod:`kafka_direct.planning.repair`).

Data loss is found here, on the driver, before a task runs: a batch that starts below the log
start reads from the log start in one step (``failOnDataLoss=false``, each loss reported once),
or fails (``true``), whatever the executors' prefetch queues still hold; so is a partition of
the batch whose topic was deleted, however the cluster answers for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import ConfigurationError
from kafka_direct.logs import RepeatLimiter
from kafka_direct.offsets import LATEST, OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning.data_loss import DataLoss, LossLedger, apply_data_loss_policy
from kafka_direct.planning.lookups import OffsetLookups
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.planning.rates import min_offsets_gate, rate_limit
from kafka_direct.planning.reader import OffsetReader
from kafka_direct.planning.repair import CheckpointRepair
from kafka_direct.planning.resolve import (
    check_covers,
    resolve_new_partitions,
    resolve_starting,
)
from kafka_direct.planning.splits import split_ranges

__all__ = ["StreamPlanner"]

log = logging.getLogger(__name__)

#: Starting positions that depend on when they are resolved. They are kept as -1 placeholders
#: until the first trigger pins them in an empty batch 0, which Spark's offset log then records.
_PINNED_KINDS = ("latest", "committed", "timestamp", "by_timestamp")


def _now_ms() -> int:
    return int(time.time() * 1000)


class StreamPlanner(OffsetLookups):
    """The micro-batch planner behind the stream reader. Keeps state between triggers."""

    def __init__(
        self,
        opts: SourceOptions,
        reader_factory: Callable[[], OffsetReader],
        clock_ms: Callable[[], int] = _now_ms,
        patience: OffsetPatience | None = None,
        on_loss: Callable[[DataLoss, int], None] | None = None,
    ) -> None:
        self.opts = opts
        self._reader_factory = reader_factory
        self._reader: OffsetReader | None = None
        self._clock_ms = clock_ms
        self._target: PartitionOffsets | None = None
        self._target_rechecked = False
        self._latest: PartitionOffsets | None = None
        self._pinned: PartitionOffsets = {}
        self._initial: PartitionOffsets | None = None
        #: Whether this process has answered latestOffset or partitions yet: a partitions call
        #: that comes first, with the initial offsets as its start, replays a logged batch 0.
        self._planned = False
        #: A JSON start that does not match the partitions: refused at the first trigger.
        self._refusal: ConfigurationError | None = None
        # Spark starts lastTriggerMillis at 0, so the first batch never waits for the minimum.
        self._last_trigger_ms = 0
        self._patience = patience or OffsetPatience(opts.fetch_offset.unavailable_timeout_ms)
        #: Where partitions stand whose checkpointed offset is invalid.
        self._repair = CheckpointRepair(self._resume_at)
        #: Data loss found while planning; ``on_loss`` hears of each new one.
        self.losses = LossLedger(on_loss)
        #: The log start of each partition of the last planned batch, as the cluster gave it.
        self.log_starts: PartitionOffsets = {}
        self._quiet = RepeatLimiter()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_refusal"] = None  # the driver's; and exceptions with such arguments do not unpickle
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
        if spec.kind == "specific":
            # Spark checks once, for a new query, that the JSON names exactly the partitions
            # there are. A restart replaying batch 0 resolves it again, after partitions may have
            # come or gone: the check waits for a new query's first trigger (latest_offsets).
            try:
                check_covers(spec, tps)
            except ConfigurationError as exc:
                self._refusal = exc
            tps = tps & set(spec.offsets)
            spec = replace(spec, offsets={tp: spec.offsets[tp] for tp in tps})
        chosen = spec
        resolved = self._patience.wait_for(
            "resolve the starting offsets",
            lambda: resolve_starting(
                chosen,
                tps,
                self.reader,
                timestamp_strategy=self.opts.timestamp_strategy,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                group=self.opts.commits.group,
                committed_fallback=self.opts.commits.committed_fallback,
            ),
        )
        if spec.kind == "specific":
            resolved.update({tp: LATEST for tp, off in spec.offsets.items() if off == LATEST})
        return resolved

    def prepare_available_now(self) -> None:
        """Fix the ``Trigger.AvailableNow`` target: everything in the log right now."""
        tps = self._current_partitions()
        self._target_rechecked = False
        self._target = self._patience.wait_for(
            "list the latest offsets", lambda: self.reader.latest(tps)
        )
        log.info("Trigger.AvailableNow target: %s", {str(tp): o for tp, o in self._target.items()})

    def latest_offsets(self, start: PartitionOffsets, *, read_all: bool) -> PartitionOffsets:
        """End offsets of the next micro-batch; ``start`` itself when there is nothing to do.

        ``read_all`` is the engine's ``ReadAllAvailable``: ignore the source's own limits.
        """
        given = start
        refusal, self._refusal = self._refusal, None
        if refusal is not None and not self._planned and start == self._initial:
            raise refusal  # the first trigger of a new query (see _resolve_initial_offsets)
        self._planned = True
        start = self._repair.usable(start)
        limited = not read_all
        gated = limited and self.opts.rates.min_offsets is not None and self._target is None
        if self._target is not None:
            self._recheck_target(start)
            latest = dict(self._target)
        else:
            fetched = self._fetch_latest(start)
            if fetched is None:
                return given  # nothing known this time: no batch; the next trigger asks again
            latest = fetched
        self._latest = latest
        if any(off == LATEST for off in start.values()):
            # First batch of a query: pin the starting position in an empty batch, so Spark's
            # offset log records it (partitions new since initialOffset are read from earliest
            # by plan_ranges).
            self._pin(start, latest)
            if gated:
                # Spark's first trigger passes delayBatch (lastTriggerMillis starts at 0) and
                # starts the delay: this one is batch 0, so the next waits for the minimum.
                self._last_trigger_ms = self._clock_ms()
            if self._target is not None:
                # A start resolved after the target was fixed (a committed offset, a timestamp)
                # may lie past it: the target moves up, so no later trigger takes the pinned
                # start for a log gone backwards.
                for tp, off in self._pinned.items():
                    if tp in self._target and off > self._target[tp]:
                        self._target[tp] = off
            return {
                tp: start[tp] if start.get(tp, LATEST) != LATEST else self._pinned.get(tp, off)
                for tp, off in latest.items()
            }
        base = {tp: off for tp, off in start.items() if tp in latest}
        new = sorted(set(latest) - set(start))
        if new:
            # One without an earliest offset yet stays out of this batch (see _earliest_of_found).
            base.update(resolve_new_partitions(new, self._earliest_of_found(new)))
        reset = [tp for tp, off in base.items() if latest[tp] < off]
        if reset:
            # Offsets went backwards (a recreated topic). plan_ranges reports it; the new log is
            # rate-limited from its start like any other partition.
            base.update(self._earliest_known(reset))
        if limited and self._rate_limited and not self.opts.fail_on_data_loss:
            # Records deleted before they were read: plan_ranges reads from the log start, so
            # the limit must count from there too, or the stream would crawl through the gap
            # one empty, rate-limited batch at a time.
            for tp, first in self._earliest_known(base).items():
                base[tp] = max(base[tp], first)
        # Not under Trigger.AvailableNow: holding back a tail below the minimum would return
        # start before the target is reached, which ends the run with that tail unread.
        if gated:
            assert self.opts.rates.min_offsets is not None
            now = self._clock_ms()
            if not min_offsets_gate(
                base,
                latest,
                min_total=self.opts.rates.min_offsets,
                max_trigger_delay_ms=self.opts.rates.max_trigger_delay_ms,
                last_trigger_ms=self._last_trigger_ms,
                now_ms=now,
            ):
                return given
            # Spark's delayBatch restarts the delay whenever it lets a trigger through, even one
            # that then finds nothing to read.
            self._last_trigger_ms = now
        end = rate_limit(
            base,
            latest,
            max_total=self.opts.rates.max_offsets if limited else None,
            max_per_partition=self.opts.rates.max_offsets_per_partition if limited else None,
        )
        for tp in reset:
            end[tp] = min(end[tp], latest[tp])
        if end != {tp: off for tp, off in start.items() if tp in end} or set(end) != set(start):
            return end
        return given

    @property
    def _rate_limited(self) -> bool:
        return self.opts.rates.limited

    def plan_ranges(
        self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
    ) -> list[OffsetRange]:
        """The ranges of micro-batch ``(start, end]``, after the failOnDataLoss policy."""
        replay = not self._planned and self._initial is not None and start == self._initial
        self._planned, self._refusal = True, None
        start, end = self._repair.repair(start, end)
        new = sorted(set(end) - set(start))
        from_offsets: PartitionOffsets = {}
        if new:
            first_new = self._earliest_of_new(new)
            from_offsets.update(
                resolve_new_partitions(
                    new,
                    first_new,
                    fail_on_data_loss=self.opts.fail_on_data_loss,
                    ledger=self.losses,
                )
            )
        losses: list[DataLoss] = []
        for tp in sorted(set(start) - set(end)):
            if start[tp] == LATEST or replay:
                # A restart replaying batch 0 resolved its start again (Spark reads its side
                # file): a partition created since is in it but not in the logged end. Nothing
                # was planned there; a later batch finds it as new and reads it from earliest.
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
        reset = [loss.topic_partition for loss in losses if loss.kind == "offset_reset"]
        # Records deleted (retention, DeleteRecords) before this batch read them: found here,
        # on the driver, so the policy never depends on what an executor still has prefetched.
        readable = [
            tp
            for tp in sorted(from_offsets)
            if tp not in reset and end.get(tp, 0) > from_offsets[tp]
        ]
        # A partition listed but without a log start is left to its task, which checks it when
        # it reads; one no longer listed is gone (a deleted topic), on the driver.
        starts = self._log_starts(readable)
        first, gone = starts.first, starts.gone
        for tp in gone:
            detail = f"{tp} is gone (offset {from_offsets[tp]} was expected)"
            losses.append(DataLoss(tp, "partition_gone", from_offsets[tp], None, detail))
        readable = [tp for tp in readable if tp not in gone]
        self.log_starts = dict(first)
        losses += [
            DataLoss(
                tp,
                "offset_out_of_range",
                from_offsets[tp],
                first[tp],
                f"offset {from_offsets[tp]} was expected but the earliest available is "
                f"{first[tp]} ({first[tp] - from_offsets[tp]} offsets are no longer in Kafka)",
            )
            for tp in readable
            if first.get(tp, -1) > from_offsets[tp]
        ]
        if losses:
            earliest = dict(first)
            if reset:
                earliest.update(
                    self._patience.wait_for(
                        "list the earliest offsets", lambda: self.reader.earliest(reset)
                    )
                )
            from_offsets = apply_data_loss_policy(
                losses,
                from_offsets,
                earliest,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                logger=log,
                ledger=self.losses,
            )
        if replay:
            log.info(
                "Replaying batch 0 from starting offsets resolved again in this run: %s",
                {str(tp): off for tp, off in sorted(start.items())},
            )
        ranges = [
            OffsetRange(tp.topic, tp.partition, from_offsets[tp], max(from_offsets[tp], end[tp]))
            for tp in sorted(from_offsets)
            if tp in end and tp not in gone
        ]
        return split_ranges(
            ranges,
            min_partitions=self.opts.splits.min_partitions,
            max_records_per_partition=self.opts.splits.max_records_per_partition,
        )
