"""One open transaction on an offset table: read the stored offsets, move them conditionally.
Plain library: runs wherever a :class:`~kafka_direct.stores.SqlOffsetStore` runs (the Spark
driver, the user's process).

The building block of ``SqlOffsetStore.transaction`` and ``exactly_once_foreach_batch``. A
mismatch raises the internal :class:`OffsetMismatch`, which the store turns into
:class:`~kafka_direct.errors.OffsetConflictError` after rolling back, when it can read the
offsets the winning writer stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.stores.sql_dialects import Dialect, is_conflict_error

__all__ = ["Connection", "StoreSession"]

#: A DB-API 2.0 connection. The standard has no typing, and the three drivers share no base class.
Connection = Any

log = logging.getLogger(__name__)


class OffsetMismatch(Exception):
    """Raised inside a session when an offset row is not where the batch expects it.

    Internal: the session turns it into OffsetConflictError after the rollback, when it can
    read what the winning writer stored.
    """

    def __init__(self, group: str, starts: dict[TopicPartition, int | None]) -> None:
        super().__init__(group)
        self.group = group
        self.starts = starts


class StoreSession:
    """One open database transaction of a :class:`SqlOffsetStore` (from ``store.session()``).

    ``cursor`` is the transaction's DB-API cursor: write your results through it. Do not commit
    or roll back yourself; the session does, when its ``with`` block ends.
    """

    def __init__(self, dialect: Dialect, table: str, connection: Connection, cursor: Any) -> None:
        self.dialect = dialect
        self.table = table
        self.connection = connection
        self.cursor = cursor

    def stored(
        self, group: str, tps: Iterable[TopicPartition] | None = None, *, lock: bool = False
    ) -> PartitionOffsets:
        """The group's stored offsets as this transaction sees them (``lock``: FOR UPDATE)."""
        self.cursor.execute(self.dialect.select_group(self.table, lock=lock), (group,))
        wanted = None if tps is None else set(tps)
        out: PartitionOffsets = {}
        for topic, partition, offset in self.cursor.fetchall():
            tp = TopicPartition(str(topic), int(partition))
            if wanted is None or tp in wanted:
                out[tp] = int(offset)
        return out

    def advance(
        self,
        group: str,
        tp: TopicPartition,
        expected: int | None,
        new: int,
        *,
        insert_if_absent: bool = False,
        allow_gap: bool = False,
    ) -> None:
        """Move ``tp`` from ``expected`` to ``new``, or raise (internally) a conflict.

        ``expected=None`` means "never stored": the row is inserted, and the primary key makes
        a concurrent first insert fail. ``insert_if_absent`` also inserts when nothing is stored
        although an offset was expected (a first batch that starts mid-log). ``allow_gap`` also
        moves a stored offset below ``expected``: offsets planned past records that were lost
        (a stream with ``failOnDataLoss=False``). Without it such a gap is a conflict: the
        records in it were never written through the store.
        """
        d, table, cur = self.dialect, self.table, self.cursor
        key = (group, tp.topic, tp.partition)
        try:
            if expected is None:
                cur.execute(d.insert(table), (*key, new))
                return
            if new != expected:
                cur.execute(d.conditional_update(table), (new, *key, expected))
                if cur.rowcount == 1:
                    return
            # Nothing to move (an empty range), or the update matched no row: find out why.
            # Not via rowcount, because MySQL counts a row whose value did not change as 0.
            cur.execute(d.select_one(table, lock=True), key)
            row = cur.fetchone()
            if row is None and insert_if_absent:
                cur.execute(d.insert(table), (*key, new))
                return
            if row is not None and int(row[0]) == expected and new == expected:
                return
            if row is not None and allow_gap and int(row[0]) < expected:
                stored = int(row[0])
                cur.execute(d.conditional_update(table), (new, *key, stored))
                if cur.rowcount == 1 or new == stored:
                    log.warning(
                        "Group '%s': %s stood at offset %d and this batch starts at %d; offsets "
                        "%d to %d were skipped (allowed: the stream runs with "
                        "failOnDataLoss=False, or allow_gap=True was passed)",
                        group, tp, stored, expected, stored, expected - 1,
                    )  # fmt: skip
                    return
        except Exception as exc:
            if is_conflict_error(exc):
                # A concurrent writer inserted the row first, or the database broke a deadlock
                # between two writers of the same rows: this writer lost the race.
                raise OffsetMismatch(group, {tp: expected}) from exc
            raise
        raise OffsetMismatch(group, {tp: expected})
