"""Which records of one ``consume()`` call a rebalance inside that call made stale. Pure: plain
library (no Spark, no Kafka client), used by a receiver in a Spark executor (its Python worker;
:mod:`~kafka_direct.dstream.receiver.loop`).

librdkafka serves a rebalance callback in the middle of ``consume()``: the records it had put in
the call's result before the callback are handed over after it, when the callback has already
logged (revoked) or dropped (lost) what the receiver held of those partitions. Kept, they would
be logged and committed by a member that no longer owns the partition: a late commit that can
rewind the new owner's, and, if the partition comes back within the same call and its fetch
restarts lower (at the group's last commit), a block whose offsets run backwards.

They are told apart by where the partition stood when the callback ran (its *position*: one
past the last offset handed to the application, records in the call's result included): the
records handed before the callback continue the fetch (above the last offset handed before the
call) and lie below that position, and they come first. The first record that does not is the
new assignment's: its fetch starts at the group's committed offset, which is at or below what
this member had not committed (then the offsets go back) or at or above the position (another
member committed further). Records of a partition not assigned once the call returns are
dropped too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Cut", "split_at_rebalance"]

#: A partition revoked or lost inside a call: (the last offset handed before the call, or None;
#: its position when the callback ran, or None if unknown).
Cut = tuple[int | None, int | None]


def split_at_rebalance(
    messages: Iterable[Any],
    cuts: Mapping[tuple[str, int], Cut],
    assigned: set[tuple[str, int]],
) -> tuple[list[Any], dict[tuple[str, int], int]]:
    """``messages`` (a call's result, in order) less the stale records (module docstring), and
    how many were dropped per partition. Events (``error()`` set) are always kept."""
    # Per cut partition: still among the records handed before its callback; the last of them.
    before = {tp: [True, cut[0]] for tp, cut in cuts.items()}
    kept: list[Any] = []
    dropped: dict[tuple[str, int], int] = {}
    for message in messages:
        if message.error() is not None:
            kept.append(message)
            continue
        tp = (message.topic(), message.partition())
        state = before.get(tp)
        if state is not None and state[0]:
            offset, last, position = message.offset(), state[1], cuts[tp][1]
            known = position is not None and position >= 0
            if known and offset < position and (last is None or offset > last):
                state[1] = offset
                dropped[tp] = dropped.get(tp, 0) + 1
                continue
            state[0] = False
        if tp not in assigned:
            dropped[tp] = dropped.get(tp, 0) + 1
            continue
        kept.append(message)
    return kept, dropped
