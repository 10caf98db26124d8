"""The stream planner's lookups against the live cluster: the partitions the strategy has now,
each trigger's latest offsets, the earliest offsets of new partitions, the starts pinned in
batch 0, the ``Trigger.AvailableNow`` target's re-check, the log starts a batch is checked
against, and where a lost position resumes. Runs in the Spark driver (the stream-runner process),
as part of :class:`kafka_direct.planning.micro_batch.StreamPlanner`, which holds the state these
methods use and does the planning; pure apart from its injected offset reader.

A partition the cluster does not answer for is waited out within ``fetchOffset.unavailableTimeout``
(:mod:`kafka_direct.planning.patience`), unless the cluster no longer lists it: its topic was
deleted, which the cluster answers "unknown topic or partition", or, once the client's metadata
has dropped the topic, with no leader (librdkafka's ``_NOENT``) inside a partial answer. Such a
partition is gone, and ``failOnDataLoss`` decides, on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from kafka_direct.config.kafka import Subscription
from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import KafkaClientError, OffsetsUnavailableError, TopicNotFoundError
from kafka_direct.logs import RepeatLimiter
from kafka_direct.offsets import LATEST, PartitionOffsets, TopicPartition
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.planning.reader import STRUCTURED, OffsetReader
from kafka_direct.planning.resolve import resolve_starting

__all__ = ["LogStarts", "OffsetLookups"]

#: What the offset reader's errors say for a topic or partition the cluster does not have
#: (kafka.translate's not-found codes, by name: this module imports no Kafka client).
_NOT_FOUND_CODES = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"})

log = logging.getLogger("kafka_direct.planning.micro_batch")


class LogStarts(NamedTuple):
    """What the cluster said about the log starts of some partitions."""

    #: The log starts it gave.
    first: PartitionOffsets
    #: Partitions it no longer lists: their topic was deleted.
    gone: set[TopicPartition]
    #: Partitions it lists but gave no log start for, with the reason (a leader down, moving or
    #: not knowing a new topic yet).
    unanswered: dict[TopicPartition, str]


class OffsetLookups:
    """Lookups of :class:`~kafka_direct.planning.micro_batch.StreamPlanner` (its state)."""

    opts: SourceOptions
    _patience: OffsetPatience
    _target: PartitionOffsets | None
    _target_rechecked: bool
    _pinned: PartitionOffsets
    _quiet: RepeatLimiter

    @property
    def reader(self) -> OffsetReader:
        raise NotImplementedError

    def _current_partitions(self, *, strict: bool = True) -> set[TopicPartition]:
        """The strategy's partitions now (waiting out an unreachable cluster when ``strict``)."""
        if strict:
            return self._patience.wait_for(
                "list the partitions", lambda: self._partitions_now(strict=True)
            )
        return self._partitions_now(strict=False)

    def _partitions_now(self, *, strict: bool) -> set[TopicPartition]:
        strategy = self.opts.strategy
        if strategy.kind == "assign" and not strict:
            # Once running, an assigned partition that vanished is data loss (failOnDataLoss
            # decides, in plan_ranges), not a reason to fail every trigger as an unknown topic.
            topics = tuple(sorted({tp.topic for tp in strategy.partitions}))
            existing = self._patience.partitions(
                lambda: self.reader.partitions(Subscription("subscribe", topics=topics))
            )
            return existing & set(strategy.partitions)
        tps = self._patience.partitions(lambda: self.reader.partitions(strategy, rules=STRUCTURED))
        if not tps:
            # Spark asks again at once when a trigger finds nothing: say it once a minute.
            self._quiet.log(
                log,
                logging.WARNING,
                "no partitions",
                "No partitions match %s yet; waiting",
                self.opts.strategy.describe(),
            )
        return tps

    def _fetch_latest(self, start: PartitionOffsets) -> PartitionOffsets | None:
        """Latest offsets for this trigger; None when the cluster gave none.

        A partition without a valid answer keeps its start (it does not advance); one the
        query has not started yet (new) is left for a later trigger. While ``start`` holds -1
        placeholders it waits (up to ``fetchOffset.unavailableTimeout``) for all of them: PySpark
        logs a query's first answer as batch 0's end whatever it is, so the placeholders must
        never be returned, and pinning some partitions later would pin them at another moment.
        """
        known = {tp: off for tp, off in start.items() if off != LATEST}
        if len(known) < len(start):
            return self._patience.wait_for(
                "list the latest offsets to pin the starting offsets",
                lambda: self._ask_latest(start, known),
            )
        try:
            return self._ask_latest(start, known)
        except KafkaClientError as exc:
            self._patience.outage(exc)
            return None

    def _ask_latest(self, start: PartitionOffsets, known: PartitionOffsets) -> PartitionOffsets:
        tps = self._current_partitions(strict=False)
        pinning = len(known) < len(start)

        def waited_out(answered: Iterable[TopicPartition]) -> list[TopicPartition]:
            # A new partition's wait ends when its earliest offset comes too (in
            # _earliest_of_found): ended here, every trigger would start it afresh.
            return [tp for tp in answered if pinning or tp in start]

        try:
            latest = self.reader.latest(tps, known=known)
        except OffsetsUnavailableError as exc:
            unpinned = [tp for tp in exc.unavailable if start.get(tp) == LATEST]
            if unpinned:
                # Batch 0 pins every partition at once, or none: wait for all of them.
                raise KafkaClientError(str(exc), code=exc.code, retriable=True) from exc
            self._patience.partial(exc.unavailable)
            latest = dict(exc.offsets)
            latest.update({tp: start[tp] for tp in exc.unavailable if tp in start})
            # A partial answer comes from a cluster in flux (a leader moving), which is when a
            # new leader can answer a log end behind what was read already (KAFKA-7703). The
            # complete answer's re-check is skipped here, so such a partition does not advance
            # in this trigger: believed, it would write an end below its start.
            latest.update({tp: off for tp, off in known.items() if latest.get(tp, off) < off})
            self._patience.answered(waited_out(exc.offsets))
            return latest
        self._patience.answered(waited_out(latest))
        return latest

    def _earliest_of_new(self, new: list[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets of a batch's new partitions, waited for (the batch is in Spark's
        offset log already). A partition the cluster no longer lists (its topic was deleted
        since the batch was logged) is left out: resolve_new_partitions reports it as Spark's
        "Cannot find earliest offsets", and failOnDataLoss decides."""

        def ask() -> PartitionOffsets:
            starts = self._log_starts(new)
            if starts.unanswered:
                raise KafkaClientError(
                    "no earliest offset for "
                    + "; ".join(f"{tp} ({why})" for tp, why in sorted(starts.unanswered.items())),
                    code="OFFSETS_UNAVAILABLE",
                    retriable=True,
                )
            return starts.first

        return self._patience.wait_for("list the earliest offsets of new partitions", ask)

    def _earliest_of_found(self, new: list[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets of the partitions a trigger found new, where they start. One without
        an answer is left out of this micro-batch: it stays new and joins a later one, and the
        stream fails only once it has had none for ``fetchOffset.unavailableTimeout``. One no
        longer listed is left out too (the next trigger does not find it). Under
        ``Trigger.AvailableNow`` the trigger waits for them instead (within the same bound): a
        trigger that found nothing else would end the run with them unread."""
        if self._target is not None:
            return self._earliest_of_new(new)
        try:
            starts = self._log_starts(new)
        except KafkaClientError as exc:
            if not exc.retriable and not isinstance(exc, TopicNotFoundError):
                raise  # refused (authorization, configuration): waiting would not help
            starts = LogStarts({}, set(), {tp: str(exc) for tp in new})
        if starts.unanswered:
            self._patience.partial(starts.unanswered)
        self._patience.answered(starts.first)
        return starts.first

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
                # not advance in this run, as a trigger's partial answer keeps it (_ask_latest).
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

    def _log_starts(self, tps: Sequence[TopicPartition]) -> LogStarts:
        """Log starts of ``tps`` the cluster gave now; those gone; those it did not answer for.

        A batch replayed from the offset log names the partitions it was planned with; one whose
        topic was deleted since makes the whole lookup fail ("unknown topic"), or, once the
        client's metadata has dropped the topic, gets no leader in a partial answer. The
        partitions the cluster lists now tell which are gone: failOnDataLoss decides about
        those, as about a partition gone between two triggers. When the lookup failed and none
        is missing from the listing, the leader only has not learnt a new topic yet, and the
        error stands (it passes by itself). When the listing itself gets no answer, a partition
        without a log start counts as listed: never reported lost on a guess."""
        try:
            first, unanswered = self._earliest_answers(tps)
        except KafkaClientError as exc:
            if not (isinstance(exc, TopicNotFoundError) or exc.code in _NOT_FOUND_CODES):
                raise
            listed = self._current_partitions(strict=False)
            gone = {tp for tp in tps if tp not in listed}
            if not gone:
                raise
            first, unanswered = self._earliest_answers([tp for tp in tps if tp not in gone])
            return LogStarts(first, gone, unanswered)
        if not unanswered:
            return LogStarts(first, set(), {})
        try:
            listed = self._current_partitions(strict=False)
        except KafkaClientError as exc:
            if not exc.retriable:
                raise
            listed = set(unanswered)
        gone = {tp for tp in unanswered if tp not in listed}
        return LogStarts(first, gone, {tp: why for tp, why in unanswered.items() if tp not in gone})

    def _earliest_answers(
        self, tps: Iterable[TopicPartition]
    ) -> tuple[PartitionOffsets, dict[TopicPartition, str]]:
        """Earliest offsets of ``tps`` the cluster gave now, and why the others got none."""
        wanted = list(tps)
        if not wanted:
            return {}, {}
        try:
            return self.reader.earliest(wanted), {}
        except OffsetsUnavailableError as exc:
            asked = set(wanted)
            first = {tp: off for tp, off in exc.offsets.items() if tp in asked}
            why = {tp: exc.unavailable.get(tp, str(exc)) for tp in wanted if tp not in first}
            return first, why

    def _earliest_known(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets of ``tps`` that the cluster gave now (partitions without an answer
        are left out: the executors check those when they read)."""
        return self._earliest_answers(tps)[0]

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
