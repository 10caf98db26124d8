"""A read's byte budget on the Python read path: one read of a consumer's queue, stopped once it
holds ``maxBatchBytes`` of records. Runs in Spark executors (Python workers) and receivers; pure
(it calls the ``consume`` it is given, and imports no client).

confluent-kafka's ``consume(n, timeout)`` cannot stop at a size, and librdkafka cannot put
records back, so the budget is kept as the C fast path keeps it (``kd_take`` in
``_native/_rdkafka_consume.c``): in chunks. The first chunk is one record, so a record larger
than the whole budget is alone in its batch; each later chunk is sized to fill half of what is
left of the budget at the mean record size so far, so chunks shrink as the budget nears. A read
also stops at an event (an error message: a partition's end, an error), which the caller must
see before taking more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["consume_within", "header_bytes", "next_chunk"]

#: A chunk never asks for more records than this: as in C, a bound on one call's list.
MAX_CHUNK = 100_000


def next_chunk(
    want: int, got: int, got_bytes: int, max_bytes: int, mean_hint: float | None = None
) -> int:
    """How many records the next chunk asks for: ``want`` more are allowed, ``got`` records of
    ``got_bytes`` came so far (module docstring). 0 once the budget or the count is reached.
    ``mean_hint``: the mean record size this consumer saw before, which sizes the first chunk
    (a consumer reading records of like sizes then asks once, as an unbudgeted read would)."""
    if want <= 0 or got_bytes >= max_bytes:
        return 0
    if got:
        mean = got_bytes / got
    elif mean_hint is not None:
        mean = mean_hint
    else:
        return 1
    fits = int((max_bytes - got_bytes) / (mean + 1) / 2) + 1
    return max(1, min(want, fits, MAX_CHUNK))


def header_bytes(headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """The bytes a record's headers add to a batch: each name's and each value's length (the
    name's UTF-8 bytes as C counts them, near enough for a budget: its length in characters)."""
    if not headers:
        return 0
    return sum(len(name) + (len(value) if value is not None else 0) for name, value in headers)


def consume_within(
    consume: Callable[[int, float], Sequence[Any]],
    n: int,
    timeout_s: float,
    max_bytes: int,
    mean_hint: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    headers: bool = False,
) -> list[Any]:
    """Up to ``n`` messages from ``consume(num, timeout)``, stopping once they hold ``max_bytes``
    of keys and values (and, with ``headers``, the headers' names and values, which the read
    carries into its batch as the C path counts them), at an event, or at ``timeout_s`` (module
    docstring; ``mean_hint``: see :func:`next_chunk`)."""
    deadline = clock() + timeout_s
    taken: list[Any] = []
    size = 0
    while True:
        chunk = next_chunk(n - len(taken), len(taken), size, max_bytes, mean_hint)
        if chunk == 0:
            return taken
        wait = max(deadline - clock(), 0.0)
        got = consume(chunk, wait)
        if not got:
            return taken
        taken.extend(got)
        # One pass in C per column, as fetch._split_events does: the messages are all of one
        # type, and len() of one is its value's length.
        cls = type(got[0])
        if any(map(cls.error, got)):
            return taken
        size += sum(map(len, got)) + sum(map(len, filter(None, map(cls.key, got))))
        if headers:
            try:
                size += sum(map(header_bytes, map(cls.headers, got)))
            except (SystemError, UnicodeDecodeError):
                # confluent-kafka cannot give a header whose key is not UTF-8; the rows' builder
                # (consumer.rows) meets the same record and names it, and the read ends there.
                return taken
        if wait == 0.0 and len(got) < chunk:
            return taken
