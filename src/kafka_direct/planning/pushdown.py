"""Filter pushdown for batch reads: the offsets a query's ``where`` clause lets a read skip. Pure:
runs in the Spark driver's planner process; the cluster is reached only through the injected
:class:`~kafka_direct.planning.reader.OffsetReader` (a fake in unit tests).

Spark hands a batch reader the conjuncts of a query's filter (``pushFilters``: top-level ANDs are
split, ORs are never pushed). :mod:`kafka_direct.source.batch` translates the ones on ``topic``,
``partition``, ``offset`` and ``timestamp`` into :class:`Predicate` s; :func:`narrow_ranges`
narrows the planned ranges with them, and :func:`is_handled` says which ones the narrowed ranges
make redundant, so that Spark may drop them. Every other predicate Spark applies as usual, so a
query returns exactly the rows it returns without pushdown.

Predicate (or its NOT)                 Effect on the planned ranges                 Handled
topic =, <=>, IN, starts/ends with,    drops the topics that cannot match           yes
  contains
partition =, <=>, IN, <, <=, >, >=     drops the partitions that cannot match       yes
offset <, <=, >, >=, =, <=>            clamps every range's [from, until)           yes
offset IN (v1, v2, ...)                clamps to [min, max + 1)                     if consecutive
offset !=, NOT IN                      nothing: a hole is not a range               no
timestamp >, >=, =, IN (lower bound)   each partition starts at the first offset    no
                                       at or after it (one ListOffsets request)
timestamp <, <=, =, IN (upper bound)   LogAppendTime topics only: each range ends   no
                                       at the first offset at or after it
IS [NOT] NULL on any of the four       everything or nothing: they are never null   yes

Why timestamps are never handled: the first offset at or after a timestamp is an exact *start*
(Kafka answers the earliest offset whose timestamp is >= the bound, so every earlier record is
older), but later records need not be newer. With ``CreateTime`` producers stamp records, and
retries, several producers or replayed data put older timestamps after newer ones: Spark must
still drop those. For the same reason an upper bound may only cut a range's end where the broker
stamps records on append (``LogAppendTime``); with ``CreateTime`` a record older than the bound
can follow the first newer one, and cutting there would lose it. (Even ``LogAppendTime`` follows
the leader's clock; a clock stepping back is the one case the cut cannot see.)

Null semantics are SQL's: these columns are never null, a comparison with a NULL literal is
NULL (the row is dropped, negated or not), ``<=>`` is never NULL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from kafka_direct.errors import KafkaClientError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.reader import OffsetReader

__all__ = [
    "Column",
    "Narrowed",
    "Op",
    "Predicate",
    "describe_pushed",
    "holds",
    "is_handled",
    "narrow_ranges",
    "timestamp_bounds_ms",
]

log = logging.getLogger(__name__)

Column = Literal["topic", "partition", "offset", "timestamp"]
Op = Literal[
    "=", "<=>", "<", "<=", ">", ">=", "in", "is null", "is not null",
    "starts with", "ends with", "contains",
]  # fmt: skip
Value = int | str | None

_NUMERIC: frozenset[str] = frozenset({"partition", "offset", "timestamp"})
_COMPARISONS: frozenset[str] = frozenset({"<", "<=", ">", ">="})
_STRING_OPS: frozenset[str] = frozenset({"starts with", "ends with", "contains"})
_NO_VALUE: frozenset[str] = frozenset({"is null", "is not null"})
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Predicate:
    """One pushed conjunct on one column, in Kafka's terms. ``timestamp`` values are
    microseconds since the epoch (Spark's precision); ``in`` takes any number of values."""

    column: Column
    op: Op
    values: tuple[Value, ...] = ()
    negated: bool = False

    def __post_init__(self) -> None:
        kind = int if self.column in _NUMERIC else str
        arity_ok = (
            len(self.values) == 0
            if self.op in _NO_VALUE
            else self.op == "in" or len(self.values) == 1
        )
        # Ordering comparisons only on numbers: a topic's order depends on Spark's collation.
        ops_ok = not (
            (self.op in _COMPARISONS and self.column not in _NUMERIC)
            or (self.op in _STRING_OPS and self.column != "topic")
        )
        types_ok = all(
            v is None or (isinstance(v, kind) and not isinstance(v, bool)) for v in self.values
        )
        if not (arity_ok and ops_ok and types_ok):
            raise ValueError(f"not a pushable predicate: {self!r}")

    def __str__(self) -> str:
        if self.op in _NO_VALUE:
            text = f"{self.column} {self.op.upper()}"
        elif self.op == "in":
            text = f"{self.column} IN ({', '.join(self._show(v) for v in self.values)})"
        else:
            text = f"{self.column} {self.op.upper()} {self._show(self.values[0])}"
        return f"NOT ({text})" if self.negated else text

    def _show(self, value: Value) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, str):
            return repr(value)
        if self.column == "timestamp":
            return (_EPOCH + dt.timedelta(microseconds=value)).isoformat().replace("+00:00", "Z")
        return str(value)


def holds(p: Predicate, value: int | str) -> bool | None:
    """SQL's three-valued answer of ``p`` for a row whose column is ``value`` (never null)."""
    truth = _truth(p, value)
    return truth if truth is None or not p.negated else not truth


def _truth(p: Predicate, value: int | str) -> bool | None:
    if p.op in _NO_VALUE:
        return p.op == "is not null"
    if p.op == "in":
        if value in [v for v in p.values if v is not None]:
            return True
        return None if None in p.values else False
    literal = p.values[0]
    if p.op == "<=>":
        return literal is not None and value == literal
    if literal is None:
        return None
    if p.op == "=":
        return value == literal
    if isinstance(value, str) and isinstance(literal, str):
        if p.op == "starts with":
            return value.startswith(literal)
        return value.endswith(literal) if p.op == "ends with" else literal in value
    if isinstance(value, int) and isinstance(literal, int):
        if p.op == "<":
            return value < literal
        if p.op == "<=":
            return value <= literal
        return value > literal if p.op == ">" else value >= literal
    raise ValueError(f"{p} cannot be evaluated for {value!r}")


@dataclass(frozen=True)
class _Interval:
    """Integers ``[lo, hi)``; None is unbounded. ``exact``: holds for every value inside."""

    lo: int | None = None
    hi: int | None = None
    exact: bool = True

    def __and__(self, other: _Interval) -> _Interval:
        los = [x for x in (self.lo, other.lo) if x is not None]
        his = [x for x in (self.hi, other.hi) if x is not None]
        return _Interval(
            max(los) if los else None, min(his) if his else None, self.exact and other.exact
        )

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo >= self.hi

    @property
    def full(self) -> bool:
        return self.lo is None and self.hi is None


_EMPTY = _Interval(0, 0)
_FULL = _Interval()
_HOLE = _Interval(exact=False)  # true almost everywhere: narrows nothing, proves nothing


def _interval(p: Predicate) -> _Interval:
    """The values of a numeric column for which ``p`` is true, as an interval."""
    if p.op in _NO_VALUE:
        return _FULL if (p.op == "is not null") != p.negated else _EMPTY
    if p.op == "in":
        known = sorted({v for v in p.values if isinstance(v, int)})
        if p.negated:
            # NOT IN with a NULL is never true; NOT IN () is always true; else a hole.
            return _EMPTY if None in p.values else _FULL if not known else _HOLE
        if not known:
            return _EMPTY
        return _Interval(known[0], known[-1] + 1, exact=len(known) == known[-1] - known[0] + 1)
    literal = p.values[0]
    if p.op == "<=>" and literal is None:
        return _FULL if p.negated else _EMPTY
    if not isinstance(literal, int):
        return _EMPTY  # a comparison with NULL is NULL, and so is its negation
    op = p.op if not p.negated else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}.get(p.op, "!=")
    if op in ("=", "<=>"):
        return _Interval(literal, literal + 1)
    if op == "<":
        return _Interval(hi=literal)
    if op == "<=":
        return _Interval(hi=literal + 1)
    if op == ">":
        return _Interval(lo=literal + 1)
    return _Interval(lo=literal) if op == ">=" else _HOLE


def _conjunction(predicates: Iterable[Predicate], column: Column) -> _Interval:
    out = _FULL
    for p in predicates:
        if p.column == column:
            out &= _interval(p)
    return out


def is_handled(p: Predicate) -> bool:
    """Whether the ranges :func:`narrow_ranges` plans make ``p`` true for every row they hold."""
    if p.column in ("topic", "partition"):
        return True  # decided per partition, exactly
    if p.column == "offset":
        return _interval(p).exact
    # Timestamps: only where the answer does not depend on the data (see the module docstring).
    interval = _interval(p)
    return interval.exact and (interval.full or interval.empty)


def timestamp_bounds_ms(predicates: Iterable[Predicate]) -> tuple[int | None, int | None, bool]:
    """``(lo, hi, empty)``: Kafka timestamps (ms) that can match are ``lo <= ts < hi``.

    A row's timestamp is ``ms * 1000`` microseconds, so a bound in microseconds becomes the
    smallest whole millisecond at or above it, for both ends.
    """
    us = _conjunction(predicates, "timestamp")
    lo = None if us.lo is None else -(-us.lo // 1000)
    hi = None if us.hi is None else -(-us.hi // 1000)
    return lo, hi, us.empty or (lo is not None and hi is not None and lo >= hi)


@dataclass(frozen=True)
class Narrowed:
    """Ranges after pushdown, and what it did (for the log)."""

    ranges: list[OffsetRange]
    offsets_before: int
    offsets_after: int
    notes: tuple[str, ...]


def narrow_ranges(
    ranges: Sequence[OffsetRange],
    predicates: Sequence[Predicate],
    reader: OffsetReader | None,
) -> Narrowed:
    """``ranges`` narrowed by ``predicates``; the narrower bound wins against the planned one.

    Timestamp bounds need the cluster; without a ``reader`` (ranges given exactly, where asking
    would cost a round trip per batch) they are left to Spark. A failed lookup only costs the
    narrowing: the read goes on, as it would without pushdown, and says why in the log.
    """
    before = sum(r.count() for r in ranges)
    notes: list[str] = []
    by_tp = [p for p in predicates if p.column in ("topic", "partition")]
    out = [r for r in ranges if all(_keeps(p, r.topic_partition) for p in by_tp)]
    if by_tp:
        kept = {r.topic_partition for r in out}
        notes.append(f"kept {len(kept)} of {len({r.topic_partition for r in ranges})} partitions")
    offsets = _conjunction(predicates, "offset")
    if not offsets.full:
        out = [_clamp(r, offsets.lo, offsets.hi) for r in out]
        notes.append(f"offsets in [{_bound(offsets.lo)}, {_bound(offsets.hi)})")
    lo, hi, empty = timestamp_bounds_ms(predicates)
    if empty:
        out = [_clamp(r, r.until_offset, None) for r in out]
        notes.append("no timestamp can match")
    elif (lo is not None or hi is not None) and reader is None:
        notes.append("timestamp bounds left to Spark (the ranges were given exactly)")
    elif reader is not None:
        if lo is not None and lo >= 0:  # negative timestamps are ListOffsets' special values
            out = _start_at(out, lo, reader, notes)
        if hi is not None and hi >= 0:
            out = _end_at(out, hi, reader, notes)
    return Narrowed(out, before, sum(r.count() for r in out), tuple(notes))


def _keeps(p: Predicate, tp: TopicPartition) -> bool:
    return holds(p, tp.topic if p.column == "topic" else tp.partition) is True


def _bound(value: int | None) -> str:
    return "-" if value is None else str(value)


def _clamp(r: OffsetRange, lo: int | None, hi: int | None) -> OffsetRange:
    start = r.from_offset if lo is None else min(max(r.from_offset, lo), r.until_offset)
    until = r.until_offset if hi is None else max(min(r.until_offset, hi), start)
    return dataclasses.replace(r, from_offset=start, until_offset=until)


def _lookup(
    reader: OffsetReader, ranges: Sequence[OffsetRange], stamp: int, what: str, notes: list[str]
) -> dict[TopicPartition, int]:
    """One ListOffsets request for every non-empty range's partition; {} if it failed."""
    wanted = sorted({r.topic_partition for r in ranges if r.count() > 0})
    if not wanted:
        return {}
    try:
        found = reader.for_timestamps({tp: stamp for tp in wanted})
    except KafkaClientError as exc:
        log.warning(
            "Filter pushdown: not narrowing by %s, the timestamp lookup failed: %s", what, exc
        )
        notes.append(f"{what}: lookup failed, left to Spark")
        return {}
    notes.append(f"{what}: one ListOffsets request for {len(wanted)} partition(s)")
    return found


def _start_at(
    ranges: list[OffsetRange], lo: int, reader: OffsetReader, notes: list[str]
) -> list[OffsetRange]:
    found = _lookup(reader, ranges, lo, f"timestamp >= {lo} ms", notes)
    out = []
    for r in ranges:
        offset = found.get(r.topic_partition)
        if offset == -1:
            r = _clamp(r, r.until_offset, None)  # no record that recent: nothing to read
        elif offset is not None and offset >= 0:
            r = _clamp(r, offset, None)
        out.append(r)
    return out


def _end_at(
    ranges: list[OffsetRange], hi: int, reader: OffsetReader, notes: list[str]
) -> list[OffsetRange]:
    topics = sorted({r.topic for r in ranges if r.count() > 0})
    if not topics:
        return ranges
    try:
        types = reader.timestamp_types(topics)
    except KafkaClientError as exc:
        log.warning(
            "Filter pushdown: not cutting ranges at timestamp < %d ms, the topics' "
            "message.timestamp.type could not be read: %s",
            hi,
            exc,
        )
        notes.append(f"timestamp < {hi} ms: timestamp types unknown, left to Spark")
        return ranges
    # CreateTime: a producer may write an older timestamp after a newer one, so the first
    # offset at or after the bound is no end: records past it may still match. Only a broker
    # that stamps on append (LogAppendTime) keeps timestamps in offset order.
    appended = {t for t in topics if types.get(t) == "LogAppendTime"}
    if len(appended) < len(topics):
        notes.append(
            f"timestamp < {hi} ms: not cut for CreateTime topic(s) "
            + ", ".join(t for t in topics if t not in appended)
        )
    cuttable = [r for r in ranges if r.topic in appended]
    found = _lookup(reader, cuttable, hi, f"timestamp < {hi} ms (LogAppendTime)", notes)
    out = []
    for r in ranges:
        offset = found.get(r.topic_partition) if r.topic in appended else None
        # -1: no record at or after the bound, so nothing to cut.
        out.append(_clamp(r, None, offset) if offset is not None and offset >= 0 else r)
    return out


def describe_pushed(predicates: Sequence[Predicate]) -> str:
    """What was pushed, for the reader's repr and the log."""
    handled = [str(p) for p in predicates if is_handled(p)]
    narrowing = [str(p) for p in predicates if not is_handled(p)]
    parts = []
    if handled:
        parts.append("pushed: " + ", ".join(handled))
    if narrowing:
        parts.append("narrowing only (Spark applies them too): " + ", ".join(narrowing))
    return "; ".join(parts) or "nothing pushed"
