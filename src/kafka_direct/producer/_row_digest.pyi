# Type stub of the C extension kafka_direct.producer._row_digest (source in _native/).
# kafka_direct.producer.digest holds scheme 1 (BLAKE2b) in Python too; keep both in step.

from collections.abc import Sequence

#: (kind "b" | "B" | "i", validity or None, offsets or None, data, array offset)
Column = tuple[str, object | None, object | None, object, int]

def sum_rows(rows: int, columns: Sequence[Column], scheme: int = 1) -> tuple[int, int]: ...
