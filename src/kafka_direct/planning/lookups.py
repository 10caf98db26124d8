"""The stream planner's offset lookups that resolve or check positions against the live
cluster: the starts pinned in batch 0, the ``Trigger.AvailableNow`` target's re-check, the log
starts a batch is checked against, and where a lost position resumes. Runs in the Spark driver
(the stream-runner process), as part of :class:`kafka_direct.planning.micro_batch.StreamPlanner`,
which holds the state these methods use; pure apart from its injected offset reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace

from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import KafkaClientError, OffsetsUnavailableError, TopicNotFoundError
from kafka_direct.offsets import LATEST, PartitionOffsets, TopicPartition
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.planning.reader import OffsetReader
from kafka_direct.planning.resolve import resolve_starting

__all__ = ["OffsetLookups"]

#: What the offset reader's errors say for a topic or partition the cluster does not have
#: (kafka.translate's not-found codes, by name: this module imports no Kafka client).
_NOT_FOUND_CODES = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"})

log = logging.getLogger("kafka_direct.planning.micro_batch")


class OffsetLookups:
    """Lookups of :class:`~kafka_direct.planning.micro_batch.StreamPlanner` (its state)."""

    opts: SourceOptions
    _patience: OffsetPatience
    _target: PartitionOffsets | None
    _target_rechecked: bool
    _pinned: PartitionOffsets

    @property
    def reader(self) -> OffsetReader:
        raise NotImplementedError

    def _current_partitions(self, *, strict: bool = True) -> set[TopicPartition]:
        raise NotImplementedError

    def _recheck_target(self, start: PartitionOffsets) -> None:
        """Ask again, once, for the target's partitions that lie behind a start already read:
        the target was fixed before the query knew its starts, so the re-check a trigger's
        latest offsets get (KAFKA-7703) could not run then. An answer still behind stands (a
        recreated topic: plan_ranges reports it)."""
        assert self._target is not None
        behind = {
            tp: off
            for tp, off in start.items()
            if off != LATEST and tp in self._target and self._target[tp] < off
        }
        if not behind or self._target_rechecked:
            return
        self._target_rechecked = True
        complete = True
        try:
            again = self.reader.latest(list(behind), known=behind)
        except OffsetsUnavailableError as exc:
            complete, again = False, dict(exc.offsets)
            log.info("Re-checking the Trigger.AvailableNow target got a partial answer: %s", exc)
        except KafkaClientError as exc:
            complete, again = False, {}
            log.info("Could not re-check the Trigger.AvailableNow target: %s", exc)
        for tp, start_offset in behind.items():
            answer = again.get(tp)
            if answer is not None and (complete or answer >= start_offset):
                self._target[tp] = answer
            else:
                # No answer that can be believed (a leader still moving): the partition does
                # not advance in this run, as a trigger's partial answer keeps it (micro_batch).
                self._target[tp] = start_offset

    def _resume_at(self, tp: TopicPartition) -> tuple[int, str]:
        """Where a partition whose checkpointed position is lost resumes (see planning.repair):
        the group's commit, else the log start; re-reading beats losing records."""
        if self.opts.commits.target is not None:
            try:
                found = self.reader.committed(self.opts.commits.target, [tp])
            except KafkaClientError as exc:
                log.info("No committed offset of %s to repair the checkpoint with: %s", tp, exc)
            else:
                if tp in found:
                    return found[tp], "the group's committed offset"
        first = self._patience.wait_for(
            f"list the earliest offset of {tp}", lambda: self.reader.earliest([tp])
        )
        return first[tp], "its earliest offset"

    def _log_starts(
        self, tps: Sequence[TopicPartition]
    ) -> tuple[PartitionOffsets, set[TopicPartition]]:
        """Log starts of ``tps`` the cluster gave now, and those of ``tps`` that are gone.

        A batch replayed from the offset log names the partitions it was planned with; one whose
        topic was deleted since makes the whole lookup fail ("unknown topic"). The partitions the
        cluster lists now tell which are gone: failOnDataLoss decides about those, as about a
        partition gone between two triggers. When none is missing from the listing, the leader
        only has not learnt a new topic yet, and the error stands (it passes by itself)."""
        try:
            return self._earliest_known(tps), set()
        except KafkaClientError as exc:
            if not (isinstance(exc, TopicNotFoundError) or exc.code in _NOT_FOUND_CODES):
                raise
            listed = self._current_partitions(strict=False)
            gone = {tp for tp in tps if tp not in listed}
            if not gone:
                raise
        return self._earliest_known([tp for tp in tps if tp not in gone]), gone

    def _earliest_known(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets of ``tps`` that the cluster gave now (partitions without an answer
        are left out: the executors check those when they read)."""
        wanted = list(tps)
        if not wanted:
            return {}
        try:
            return self.reader.earliest(wanted)
        except OffsetsUnavailableError as exc:
            return dict(exc.offsets)

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
                # A partition the option leaves out is refused by resolve_starting, by name.
                spec = replace(
                    spec, offsets={tp: spec.offsets[tp] for tp in todo if tp in spec.offsets}
                )
            chosen = spec
            # Resolved against the live cluster: a leader moving at this moment is waited out
            # (fetchOffset.unavailableTimeout), as every other offset request of the query is.
            self._pinned.update(
                self._patience.wait_for(
                    "resolve the starting offsets",
                    lambda: resolve_starting(
                        chosen,
                        set(todo),
                        self.reader,
                        timestamp_strategy=self.opts.timestamp_strategy,
                        fail_on_data_loss=self.opts.fail_on_data_loss,
                        group=self.opts.commits.group,
                        committed_fallback=self.opts.commits.committed_fallback,
                    ),
                )
            )
        else:
            self._pinned.update({tp: latest[tp] for tp in todo})
        log.info(
            "Starting offsets pinned in batch 0: %s", {str(tp): self._pinned[tp] for tp in todo}
        )
