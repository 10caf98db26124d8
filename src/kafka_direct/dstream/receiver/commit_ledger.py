"""Which logged offsets a receiver still owes its group: commits that failed, kept until one
succeeds. Pure: plain library (no Spark, no Kafka client); the receiver's loop
(:mod:`~kafka_direct.dstream.receiver.loop`, in a Spark executor) asks it.

A receiver commits a block's offsets once the block is in the log. When the group refuses that
commit (a rebalance in progress, the member's session expired while the broker stalled), the
records are safe in the log but the group's offset lags behind them. Dropping the failed commit,
as Spark's ``ReliableKafkaReceiver`` does, means the partition's next owner reads those records
again; when that next owner is the same receiver, after it rejoins, every record it had logged
since its last good commit repeats. So the ledger keeps them:

- the next commit (the next block's, or a retry every :data:`RETRY_EVERY_S`) carries what is
  owed for the partitions still assigned;
- when a partition comes back to this receiver, what is owed is committed before it fetches,
  if the group's offset is still behind it. Records below it are in this receiver's log, so
  starting past them loses nothing; a group offset at or past it (another member read further
  meanwhile) is left alone and the debt dropped.

Only this receiver's own debts are kept: a partition read by another member in between may still
repeat there (the receiver approach is at-least-once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["RETRY_EVERY_S", "CommitLedger"]

TP = tuple[str, int]

#: How often a receiver retries a failed commit when no new block brings one.
RETRY_EVERY_S = 1.0


class CommitLedger:
    """Offsets logged whose commit the group has not confirmed (next offset to read, per
    partition)."""

    def __init__(self) -> None:
        self.owed: dict[TP, int] = {}

    def __bool__(self) -> bool:
        return bool(self.owed)

    def request(self, logged: Mapping[TP, int], assigned: Iterable[TP]) -> dict[TP, int]:
        """What to commit now: ``logged`` (a block's offsets) plus what is owed for partitions
        still ``assigned`` (never for others: their offsets are another member's to move)."""
        mine = set(assigned)
        due = {tp: offset for tp, offset in self.owed.items() if tp in mine}
        for tp, offset in logged.items():
            due[tp] = max(offset, due.get(tp, offset))
        return due

    def settled(self, offsets: Mapping[TP, int], ok: bool) -> None:
        """The outcome of committing ``offsets``: cleared if the group took them, owed if not."""
        for tp, offset in offsets.items():
            if ok:
                if self.owed.get(tp, -1) <= offset:
                    self.owed.pop(tp, None)
            else:
                self.owed[tp] = max(offset, self.owed.get(tp, offset))

    def returning(self, assigned: Iterable[TP]) -> list[TP]:
        """The partitions just assigned that this receiver owes a commit for."""
        return sorted(tp for tp in set(assigned) if tp in self.owed)

    def reclaim(self, committed: Mapping[TP, int | None]) -> dict[TP, int]:
        """Of the returning partitions, those whose group offset (None: there is none) is still
        behind what this receiver logged: commit these before fetching. The others are dropped:
        another member read past the debt."""
        ahead: dict[TP, int] = {}
        for tp, group_offset in committed.items():
            owed = self.owed.get(tp)
            if owed is None:
                continue
            if group_offset is None or group_offset < owed:
                ahead[tp] = owed
            else:
                del self.owed[tp]
        return ahead
