"""The digest an exactly-once write task commits in its marker beside its record count: a
fingerprint of the rows it wrote, so that a replayed task whose rows differ from the committed
ones is refused instead of skipped (:func:`~kafka_direct.producer.markers.check_replay`). Pure:
plain library and pyarrow, no Spark, no Kafka client; runs in Spark executors (Python workers).

What it covers: every column the sink writes (the key, the value, the headers' keys and values,
the topic column, the partition column) and the ``topic`` option when it wins. Nulls are told
apart from empty values. Columns the sink ignores are not covered.

It does not depend on the order of the rows. Spark replays a micro-batch's task with the same
input, but not always in the same order: a packed task reads its partitions as their fetches
come back, and a task after a shuffle reads map outputs as they arrive. Each row is hashed alone
(16 bytes, over its columns' encoding) and the digest is the sum of the rows' hashes modulo
2^128, so the same rows in another order give the same digest, and other rows (one changed, one
missing and one repeated) another.

Two schemes, named in the digest (``scheme:hex``), so that a marker is always checked by the
hash that wrote it:

- ``rowsum2`` (written when the C extension is built): XXH3-128, in C (``_row_digest``, no
  per-row Python work), about twenty times cheaper per short row than BLAKE2b.
- ``rowsum1`` (written by builds without a C compiler, and by kafka_direct before rowsum2):
  BLAKE2b-128, in C or, without it, with :mod:`hashlib` row by row (the same digests; the unit
  tests compare both).

A replayed task checks its rows with its marker's scheme (:func:`scheme_of`). A marker whose
scheme this process cannot compute (rowsum2 without the C extension, or an unknown one) is
checked by its count only, and the task says so in a warning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from kafka_direct.producer.columns import SinkColumns

__all__ = [
    "BLAKE2B_SCHEME",
    "DIGEST_SCHEME",
    "XXH3_SCHEME",
    "RowCount",
    "RowDigest",
    "computable",
    "native_available",
    "scheme_of",
    "sum_rows",
]

#: BLAKE2b-128 per row: computable everywhere (in C, or with hashlib).
BLAKE2B_SCHEME = "rowsum1"
#: XXH3-128 per row: computable only by the C extension.
XXH3_SCHEME = "rowsum2"
_SCHEME_NUMBERS = {BLAKE2B_SCHEME: 1, XXH3_SCHEME: 2}

_MOD = 1 << 128

#: A column as the C code takes it: (kind, validity, offsets, data, array offset); kind "b"
#: binary, "B" large binary, "i" int64.
Column = tuple[str, Any, Any, Any, int]

try:
    from kafka_direct.producer import _row_digest

    _native_sum: Callable[[int, Sequence[Column], int], tuple[int, int]] | None = (
        _row_digest.sum_rows
    )
except ImportError:  # built without a C compiler: the same sums, in Python
    _native_sum = None


def native_available() -> bool:
    return _native_sum is not None


#: The scheme this process writes: the cheapest it can compute.
DIGEST_SCHEME = XXH3_SCHEME if native_available() else BLAKE2B_SCHEME


def scheme_of(digest: str | None) -> str | None:
    """The scheme of a marker's digest (``scheme:hex``), or None when it has none."""
    if not digest or ":" not in digest:
        return None
    return digest.partition(":")[0]


def computable(scheme: str | None) -> bool:
    """Whether this process can compute digests of ``scheme``."""
    if scheme == BLAKE2B_SCHEME:
        return True
    return scheme == XXH3_SCHEME and native_available()


class RowDigest:
    """Feed it a task's batches (:meth:`update`), in any order; :meth:`hexdigest` at the end.
    ``scheme``: :data:`DIGEST_SCHEME` unless given (a replay's check: its marker's)."""

    def __init__(self, columns: SinkColumns, scheme: str | None = None) -> None:
        scheme = DIGEST_SCHEME if scheme is None else scheme
        if not computable(scheme):
            raise ValueError(f"digests of scheme {scheme!r} cannot be computed here")
        self.columns = columns
        self.scheme = scheme
        self.rows = 0
        self._sum = 0

    def update(self, batch: pa.RecordBatch) -> None:
        c = self.columns
        arrays: list[pa.Array] = [_binary(batch.column(c.value))]
        if c.key is not None:
            arrays.append(_binary(batch.column(c.key)))
        if c.headers is not None:
            arrays.append(_encoded_headers(batch.column(c.headers)))
        if c.topic is None and c.topic_column is not None:
            arrays.append(_binary(batch.column(c.topic_column)))
        if c.partition is not None:
            arrays.append(_int64(batch.column(c.partition)))
        self._sum = (self._sum + sum_rows(arrays, self.scheme)) % _MOD
        self.rows += batch.num_rows

    def _parts(self) -> str:
        c = self.columns
        parts = ["value"]
        if c.key is not None:
            parts.append("key")
        if c.headers is not None:
            parts.append("headers")
        if c.topic is None and c.topic_column is not None:
            parts.append("topic")
        if c.partition is not None:
            parts.append("partition")
        return ",".join(parts)

    def hexdigest(self) -> str:
        final = hashlib.blake2b(digest_size=16)
        final.update(f"{self._parts()}\ntopic option={self.columns.topic or ''}\n".encode())
        final.update(self._sum.to_bytes(16, "little"))
        return f"{self.scheme}:{final.hexdigest()}"


class RowCount:
    """:class:`RowDigest`'s stand-in with ``transactionReplayCheck=count``: counts the rows and
    digests nothing (the marker carries the count only)."""

    def __init__(self) -> None:
        self.rows = 0

    def update(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows

    def hexdigest(self) -> None:
        return None


def sum_rows(arrays: Sequence[pa.Array], scheme: str = BLAKE2B_SCHEME) -> int:
    """The sum modulo 2^128 of the rows' hashes of ``scheme`` over ``arrays`` (binary, large
    binary or int64 arrays of one length), in C when built, else (BLAKE2b only) in Python."""
    number = _SCHEME_NUMBERS[scheme]
    if not arrays or len(arrays[0]) == 0:
        return 0
    if _native_sum is not None:
        lo, hi = _native_sum(len(arrays[0]), [_layout(a) for a in arrays], number)
        return lo | (hi << 64)
    if scheme != BLAKE2B_SCHEME:
        raise ValueError(f"digests of scheme {scheme!r} need the C extension _row_digest")
    return sum_rows_python(arrays)


def sum_rows_python(arrays: Sequence[pa.Array]) -> int:
    """:func:`sum_rows` of the BLAKE2b scheme with :mod:`hashlib`, row by row (the reference of
    the C code)."""
    total = 0
    for row in zip(*(a.to_pylist() for a in arrays), strict=True):
        h = hashlib.blake2b(digest_size=16)
        for value in row:
            if value is None:
                h.update(b"\x00")
            elif isinstance(value, int):
                h.update(b"\x02" + value.to_bytes(8, "little", signed=True))
            else:
                data = value.encode() if isinstance(value, str) else bytes(value)
                h.update(b"\x01" + len(data).to_bytes(8, "little") + data)
        total += int.from_bytes(h.digest(), "little")
    return total % _MOD


def _layout(array: pa.Array) -> Column:
    buffers = array.buffers()
    if pa.types.is_int64(array.type):
        return ("i", buffers[0], None, buffers[1], array.offset)
    kind = "B" if pa.types.is_large_binary(array.type) else "b"
    return (kind, buffers[0], buffers[1], buffers[2], array.offset)


def _one_array(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return pa.concat_arrays(array.chunks) if array.num_chunks != 1 else array.chunk(0)
    return array


def _binary(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string or binary column as binary or large binary (the same bytes); other layouts
    (views) are cast to large binary."""
    array = _one_array(array)
    t = array.type
    if pa.types.is_string(t):
        return array.view(pa.binary())
    if pa.types.is_large_string(t):
        return array.view(pa.large_binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return array
    return array.cast(pa.large_binary())


def _int64(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    array = _one_array(array)
    return array if pa.types.is_int64(array.type) else array.cast(pa.int64())


def _encoded_headers(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Spark's headers column (a list of key/value structs per row) as one binary value per row:
    the count, then each header's key and value, lengths first (-1 for a null value). A null
    list stays null. Row by row in Python: headers are rare, and short."""
    out: list[bytes | None] = []
    for headers in _one_array(array).to_pylist():
        if headers is None:
            out.append(None)
            continue
        parts = [len(headers).to_bytes(8, "little")]
        for header in headers:
            if header is None:
                parts.append(b"\xff" * 8)  # a null header (the sink refuses it on produce)
                continue
            # By position, as the sink writes them: the struct's fields may be named in any
            # case (Key, VALUE), which Spark's type check accepts.
            for field in tuple(header.values())[:2]:
                if field is None:
                    parts.append(b"\xff" * 8)
                else:
                    data = field.encode() if isinstance(field, str) else bytes(field)
                    parts.append(len(data).to_bytes(8, "little") + data)
        out.append(b"".join(parts))
    return pa.array(out, pa.large_binary())
