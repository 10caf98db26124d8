"""Checkpoints that already hold an invalid offset, read and repaired. Pure: runs in the Spark
driver (the stream runner), with the cluster behind an injected lookup.

Before offsets were validated, a slow broker could get librdkafka's ``OFFSET_INVALID`` (-1001)
into Spark's offset log as a batch's end offset, and every restart then failed on it
(regression: "a slow broker bricks the checkpoint"). Such offsets are read as "not advanced":

- In the batch whose end holds one (Spark replays it from the offset log), that partition reads
  nothing; :class:`CheckpointRepair` remembers where it stood, and the next trigger, whose start
  is that same end, carries on from there. Nothing is lost or read twice.
- A start holding one that this run never saw (its batch was committed before a restart) has no
  position left: it resumes at the group's committed offset if the query commits to a group,
  else at the log start. Re-reading beats skipping; a warning says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kafka_direct.logs import RepeatLimiter
from kafka_direct.offsets import LATEST, PartitionOffsets, TopicPartition

__all__ = ["CheckpointRepair", "is_invalid"]

log = logging.getLogger(__name__)


def is_invalid(offset: int) -> bool:
    """An offset that must never be planned: negative, except the -1 "not pinned yet" marker."""
    return offset < 0 and offset != LATEST


class CheckpointRepair:
    """Positions of partitions whose checkpointed offset is invalid (see the module docstring).

    ``lookup(tp)`` answers where an unseen partition resumes, and from what (a description).
    """

    def __init__(self, lookup: Callable[[TopicPartition], tuple[int, str]]) -> None:
        self._lookup = lookup
        self.positions: PartitionOffsets = {}
        self._quiet = RepeatLimiter()

    def usable(self, offsets: Mapping[TopicPartition, int]) -> PartitionOffsets:
        """``offsets`` with each invalid entry replaced by where that partition stands."""
        return {
            tp: self.position(tp, off) if is_invalid(off) else off for tp, off in offsets.items()
        }

    def position(self, tp: TopicPartition, bad: int) -> int:
        """Where ``tp`` stands when the checkpoint says ``bad``."""
        if tp in self.positions:
            return self.positions[tp]
        offset, where = self._lookup(tp)
        self.positions[tp] = offset
        log.warning(
            "The checkpoint holds an invalid offset %d for %s (written when its leader did not "
            "answer, by an older kafka_direct). Its position is not known in this run; reading "
            "on from %s, %d, so records may be read again but none are skipped.",
            bad,
            tp,
            where,
            offset,
        )
        return offset

    def repair(
        self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
    ) -> tuple[PartitionOffsets, PartitionOffsets]:
        """A batch's ``start`` and ``end`` without invalid offsets: an invalid end means the
        partition's leader did not answer when the batch was planned, so it does not advance."""
        fixed_start = self.usable(start)
        fixed_end = dict(end)
        for tp, off in end.items():
            if off >= 0:
                continue
            was = fixed_start.get(tp)
            if was is None:
                del fixed_end[tp]  # a new partition without a valid end: found again later
                where = "it is left for a later batch"
            elif was == LATEST:
                del fixed_end[tp]  # batch 0 could not pin it: the next trigger pins it
                self.positions[tp] = LATEST
                where = "it is pinned by a later batch"
            else:
                fixed_end[tp] = was
                self.positions[tp] = was
                where = f"later batches read on from {was}"
            self._quiet.log(
                log,
                logging.WARNING,
                ("repair", tp, off),
                "The checkpoint holds an invalid end offset %d for %s in this batch (written "
                "when its leader did not answer, by an older kafka_direct): %s does not "
                "advance in this batch; %s.",
                off,
                tp,
                tp,
                where,
            )
        return fixed_start, fixed_end
