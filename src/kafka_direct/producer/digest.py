"""The digest an exactly-once write task commits in its marker beside its record count: a
fingerprint of the rows it wrote, so that a replayed task whose rows differ from the committed
ones is refused instead of skipped (:func:`~kafka_direct.producer.markers.check_replay`). Pure:
plain library and pyarrow, no Spark, no Kafka client; runs in Spark executors (Python workers).

What it covers: every column the sink writes, in row order (the key, the value, the headers'
keys and values, the topic column, the partition column) and the ``topic`` option when it
wins. Nulls are told apart from empty values. Columns the sink ignores are not covered.

How: BLAKE2b, one running hash per column part, fed the bytes of each Arrow batch and the
lengths of its values. A hash per part, rather than one over the rows, keeps the result
independent of how Spark cut the task's rows into batches, and lets a batch be fed as a few
contiguous buffers (no per-row Python work): hashing 100-byte values runs at several hundred
MB/s (docs/performance.md).
"""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from kafka_direct.producer.columns import SinkColumns

__all__ = ["DIGEST_SIZE", "RowDigest"]

#: Bytes of the digest (hex in the marker: twice as many characters).
DIGEST_SIZE = 16

#: The parts, in the order they enter the final digest.
_PARTS = (
    "key",
    "value",
    "headers.count",
    "headers.null",
    "headers.key",
    "headers.value",
    "topic",
    "partition",
)


def _hasher() -> hashlib.blake2b:
    return hashlib.blake2b(digest_size=DIGEST_SIZE)


class RowDigest:
    """Feed it a task's batches in order (:meth:`update`); :meth:`hexdigest` at the end."""

    def __init__(self, columns: SinkColumns) -> None:
        self.columns = columns
        self.rows = 0
        self._parts = {part: (_hasher(), _hasher()) for part in _PARTS}  # (lengths, bytes)

    def update(self, batch: pa.RecordBatch) -> None:
        c = self.columns
        self.rows += batch.num_rows
        self._binary("value", batch.column(c.value))
        if c.key is not None:
            self._binary("key", batch.column(c.key))
        if c.headers is not None:
            self._headers(batch.column(c.headers))
        if c.topic is None and c.topic_column is not None:
            self._binary("topic", batch.column(c.topic_column))
        if c.partition is not None:
            lengths, _ = self._parts["partition"]
            lengths.update(_int64(batch.column(c.partition)))

    def _binary(self, part: str, array: pa.Array) -> None:
        lengths, data = self._parts[part]
        lengths.update(_int64(pc.binary_length(array)))
        data.update(_value_bytes(array))

    def _headers(self, array: pa.Array) -> None:
        counts, _ = self._parts["headers.count"]
        counts.update(_int64(pc.list_value_length(array)))
        if len(array) == 0:
            return
        pairs = array.flatten()  # the headers of the rows in this slice, nulls left out
        keys, values = pairs.flatten()
        valid = pairs.is_valid()
        nulls, _ = self._parts["headers.null"]
        nulls.update(_int64(pc.if_else(valid, 0, -1)))  # a null header (refused on produce)
        self._binary("headers.key", keys)
        self._binary("headers.value", values)

    def hexdigest(self) -> str:
        final = _hasher()
        final.update(f"topic option={self.columns.topic or ''}\n".encode())
        for part in _PARTS:
            lengths, data = self._parts[part]
            final.update(part.encode() + b"\n" + lengths.digest() + data.digest())
        return final.hexdigest()


def _int64(array: pa.Array) -> memoryview:
    """An integer array as int64 bytes (the machine's order: a marker is read back by the same
    kind of executor), a null as -1."""
    filled = pc.fill_null(array.cast(pa.int64()), -1)
    start = filled.offset * 8
    return memoryview(filled.buffers()[1])[start : start + len(filled) * 8]


def _value_bytes(array: pa.Array) -> memoryview | bytes:
    """The bytes of a binary or string array's values (of this slice only), back to back."""
    if isinstance(array, pa.ChunkedArray):
        array = pa.concat_arrays(array.chunks)
    if len(array) == 0 or array.null_count == len(array):
        return b""
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    if not large and not (pa.types.is_binary(array.type) or pa.types.is_string(array.type)):
        array = array.cast(pa.large_binary())  # e.g. a view type: the canonical layout
        large = True
    _, offsets, data = array.buffers()[:3]
    width = 8 if large else 4
    first = int.from_bytes(offsets[array.offset * width : (array.offset + 1) * width], "little")
    end = array.offset + len(array)
    last = int.from_bytes(offsets[end * width : (end + 1) * width], "little")
    return memoryview(data)[first:last] if data is not None else b""
