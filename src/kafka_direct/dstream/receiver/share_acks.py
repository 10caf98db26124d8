"""Acknowledgement bookkeeping of a share stream (``KafkaUtils.createShareStream``): which of a
receiver's acknowledgements the broker refused, and what that means for the records; and the
driver's per-batch view of it. Pure: plain library (no Spark, no Kafka client). The
:class:`AckLedger` runs in the receivers (executors); :class:`LockWatch` and
:func:`lock_warning` run in the Spark driver.

The broker answers a set of acknowledgements per partition, and refuses them all with one error
(``INVALID_RECORD_STATE`` when the record is no longer acquired by this member: its lock expired,
or the member's share session was reset). What a refusal means depends on what was sent:

- a refused ``ACCEPT``: the record is in the write-ahead log already, and the group delivers it
  again: it will be processed twice (a repeat, counted; never a loss);
- a refused ``RELEASE`` or ``REJECT``: nothing was logged, and the record comes back (a release)
  or would have been archived anyway (a reject on a record another member now holds gets its own
  verdict there): nothing is repeated.

So the ledger remembers what each unanswered acknowledgement said, until the broker answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ACCEPT", "REJECT", "RELEASE", "AckLedger", "AckOutcome", "LockWatch", "lock_warning"]

ACCEPT, RELEASE, REJECT = "accept", "release", "reject"

#: Unanswered acknowledgements a ledger keeps at most; the oldest are forgotten beyond it (the
#: client answers every set it sends, so this only bounds memory if an answer is ever lost).
MAX_UNANSWERED = 100_000


@dataclass(frozen=True)
class AckOutcome:
    """The broker's answer to one set of acknowledgements, by what they had said."""

    confirmed: int = 0
    #: ``ACCEPT`` refused: the record is logged and comes back: a repeat.
    refused_accepts: int = 0
    #: ``RELEASE`` / ``REJECT`` refused: nothing logged, nothing repeated.
    refused_others: int = 0


class AckLedger:
    """What each acknowledgement a receiver sent said, until the broker answers it."""

    def __init__(self, limit: int = MAX_UNANSWERED) -> None:
        self._sent: dict[tuple[str, int, int], str] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._sent)

    def note(self, topic: str, partition: int, offset: int, kind: str) -> None:
        key = (topic, partition, offset)
        self._sent.pop(key, None)  # re-acquired and acknowledged again: the newest counts
        self._sent[key] = kind
        if len(self._sent) > self._limit:
            del self._sent[next(iter(self._sent))]

    def settle(self, offsets: Mapping[Any, Iterable[int]] | None, refused: bool) -> AckOutcome:
        """The broker answered: ``offsets`` maps a TopicPartition (``.topic``, ``.partition``)
        to the offsets it answered for; ``refused`` when it refused them."""
        confirmed = accepts = others = 0
        for tp, answered in (offsets or {}).items():
            for offset in answered:
                # Not in the ledger (forgotten): counted as an ACCEPT, an upper bound on repeats.
                kind = self._sent.pop((tp.topic, tp.partition, offset), ACCEPT)
                if not refused:
                    confirmed += 1
                elif kind == ACCEPT:
                    accepts += 1
                else:
                    others += 1
        return AckOutcome(confirmed, accepts, others)


@dataclass(frozen=True)
class LockCounts:
    """What the receivers reported since the last batch."""

    lock_expired: int = 0
    refused_accepts: int = 0

    def __bool__(self) -> bool:
        return bool(self.lock_expired or self.refused_accepts)


class LockWatch:
    """The driver's running totals of the receivers' lock counters, turned into per-batch deltas.

    A receiver reports totals of its current attempt (``lock_expired``, ``accept_refused`` in
    its status); a restarted receiver starts again from 0, so the watch keys totals by
    (receiver, attempt).
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], tuple[int, int]] = {}

    def since_last(self, reports: Sequence[tuple[int, int, int, int]]) -> LockCounts:
        """``reports``: (receiver, attempt, lock_expired, accept_refused) per receiver."""
        expired = refused = 0
        for receiver, attempt, lock_expired, accept_refused in reports:
            before = self._seen.get((receiver, attempt), (0, 0))
            # A status is never older than one seen before, except if it is re-read as None
            # (a receiver not started yet): never count backwards.
            now = (max(before[0], lock_expired), max(before[1], accept_refused))
            expired += now[0] - before[0]
            refused += now[1] - before[1]
            self._seen[(receiver, attempt)] = now
        return LockCounts(expired, refused)


def lock_warning(stream: str, group: str, lock_ms: int, counts: LockCounts) -> str:
    """The driver's warning when receivers lost locks: what happened, the setting, the fix."""
    what = []
    if counts.lock_expired:
        what.append(
            f"held {counts.lock_expired} record(s) past their lock before logging them (not "
            "logged; the group delivers them again)"
        )
    if counts.refused_accepts:
        what.append(
            f"had the acknowledgements of {counts.refused_accepts} logged record(s) refused by "
            "the broker (the group delivers them again: each is processed twice)"
        )
    return (
        f"Stream {stream}: since the last batch, the receivers {' and '.join(what)}. The lock "
        f"is share group '{group}''s config share.record.lock.duration.ms, now {lock_ms} ms: "
        f"raise it (kafka-configs --entity-type groups --entity-name {group} --alter "
        f"--add-config share.record.lock.duration.ms=N, at most the broker's "
        "group.share.max.record.lock.duration.ms), or make recordCheck faster."
    )
