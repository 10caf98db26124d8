"""Whether a Spark write task's input really ended, or was cut off by an upstream failure. Runs in
Spark executors (the write task's Python worker); :func:`check_supported` runs on the driver.

Why this exists. A Python data source's ``write()`` runs inside an Arrow map function
(``data_source_write_func`` in ``pyspark/sql/worker/write_into_data_source.py``) fed by the JVM's
Arrow input runner. When an operator upstream of the sink fails (a UDF raises, a shuffle fetch
fails), the JVM records the error, stops feeding the Python worker and shuts the socket's output
down. pyarrow's stream reader takes that end of file as an end of stream, so ``write()``'s
iterator ends *normally*, holding only the rows sent before the failure. The JVM reports the
upstream error only after ``write()`` returned. Anything ``write()`` makes final at the end of its
input (a Kafka transaction's commit) would then publish a partial task.

How the end is told apart. Spark's protocol (PySpark 4.2 and 4.3, ``pyspark/worker.py``): once
the JVM has sent all of a task's input it writes the finish signal ``END_OF_STREAM`` (the int
-4), which the worker reads after the function returned to decide whether it can be reused. A
cut-off input has no finish signal: the stream is at end of file. So, after the last Arrow batch
was read, the next four bytes of the worker's input decide:

- ``END_OF_STREAM``: the input is complete (:data:`InputEnd.COMPLETE`);
- end of file: the input was cut off (:data:`InputEnd.CUT_OFF`);
- anything else, no answer in time, or a PySpark whose worker does not look as expected:
  :data:`InputEnd.UNKNOWN`, which the exactly-once sink treats as cut off (it never commits on
  a guess).

The bytes are only peeked at, never consumed: PySpark reads the finish signal itself afterwards.
The input stream is found by walking the task's call stack to PySpark's worker frame (a local
named ``input_data_stream`` in 4.3, ``infile`` in 4.2): internal, as ``register()``'s worker
site is, and pinned by a test against the installed PySpark.
"""

from __future__ import annotations

import enum
import functools
import importlib.util
import logging
import os
import select
import socket
import struct
import sys
import time
import types
from typing import Any

__all__ = ["InputEnd", "check_supported", "input_end", "unsupported_reason"]

log = logging.getLogger(__name__)

#: Spark's ``SpecialLengths.END_OF_STREAM``, as the JVM writes it (a big-endian int).
END_OF_STREAM = struct.pack(">i", -4)

#: The names PySpark's worker gives the task's input stream (4.3, then 4.2).
STREAM_NAMES = ("input_data_stream", "infile")

#: How long to wait for the finish signal after the last batch. The JVM writes it with the end of
#: the Arrow stream, so it is normally already buffered; a wait this long means something is off.
WAIT_S = 30.0

_WORKER_FILE = os.path.join("pyspark", "worker.py")


class InputEnd(enum.Enum):
    """How a write task's input ended (module docstring)."""

    COMPLETE = "complete"
    CUT_OFF = "cut off"
    UNKNOWN = "unknown"


def _worker_stream() -> Any | None:
    """The worker's input stream, from the first PySpark worker frame up the call stack."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_WORKER_FILE):
            names = frame.f_locals
            for name in STREAM_NAMES:
                stream = names.get(name)
                if stream is not None and hasattr(stream, "peek"):
                    return stream
        frame = frame.f_back
    return None


def _peek_next(stream: Any, wait_s: float) -> bytes | None:
    """The next bytes of ``stream`` without consuming them: b"" at end of file, None when
    nothing came within ``wait_s``. A buffered reader's ``peek`` blocks on an empty buffer,
    so the descriptor is first asked without blocking, then waited on."""
    fd = stream.fileno()
    blocking = os.get_blocking(fd)
    try:
        os.set_blocking(fd, False)
        try:
            ahead = stream.peek(len(END_OF_STREAM))
        except BlockingIOError:
            ahead = b""
    finally:
        os.set_blocking(fd, blocking)
    deadline = time.monotonic() + wait_s
    # Empty: at end of file, or nothing sent yet; a readable descriptor tells which.
    while not ahead:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], left)
        if readable:
            ahead = stream.peek(len(END_OF_STREAM))
            if not ahead:
                return b""
    # A part of the finish signal: the JVM's write may have been cut inside it. The reader's
    # peek returns what it buffered without reading more, so the rest is looked for in the
    # socket itself, without consuming it.
    buffered = bytes(ahead)
    while _part_of_signal(buffered):
        rest = _socket_peek(fd, len(END_OF_STREAM) - len(buffered))
        whole = buffered + (rest or b"")
        if not rest or not _part_of_signal(whole) or time.monotonic() >= deadline:
            return whole  # no socket, the end of file, the whole signal or not the signal
        time.sleep(0.001)
    return buffered


def _part_of_signal(ahead: bytes) -> bool:
    return len(ahead) < len(END_OF_STREAM) and END_OF_STREAM.startswith(ahead)


def _socket_peek(fd: int, size: int) -> bytes | None:
    """Up to ``size`` bytes waiting in the socket behind ``fd``, left in place (``MSG_PEEK``):
    b"" at its end; None when it is no socket, or nothing came within a second."""
    copy = os.dup(fd)
    # The copy shares the stream's open file: a socket object may make it non-blocking (a
    # process-wide default timeout), which PySpark's reads would then meet. Kept as it was.
    blocking = os.get_blocking(fd)
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # not a socket
        os.close(copy)
        return None
    try:
        readable, _, _ = select.select([sock], [], [], 1.0)
        if not readable:
            return None
        return sock.recv(size, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:  # BlockingIOError included
        return None
    finally:
        sock.close()
        os.set_blocking(fd, blocking)


def input_end(wait_s: float = WAIT_S) -> InputEnd:
    """How the running write task's input ended; call it once the input iterator is exhausted.
    Outside a PySpark worker (a unit test, a user's thread) the answer is UNKNOWN."""
    stream = _worker_stream()
    if stream is None:
        return InputEnd.UNKNOWN
    try:
        ahead = _peek_next(stream, wait_s)
    except (OSError, ValueError) as exc:  # a closed or odd stream: no proof either way
        log.debug("Could not look past the task's input: %r", exc)
        return InputEnd.UNKNOWN
    if ahead is None:
        return InputEnd.UNKNOWN
    if not ahead:
        return InputEnd.CUT_OFF
    if ahead[: len(END_OF_STREAM)] == END_OF_STREAM:
        return InputEnd.COMPLETE
    log.debug("The task's input goes on with %r, not Spark's finish signal", ahead[:8])
    return InputEnd.UNKNOWN


def _nested_code(code: types.CodeType) -> list[types.CodeType]:
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_nested_code(const))
    return found


@functools.lru_cache(maxsize=1)
def unsupported_reason() -> str | None:
    """Why :func:`input_end` cannot work with the installed PySpark, or None when it can: its
    worker must have a function that reads the task's input under one of :data:`STREAM_NAMES`
    and checks the finish signal. Compiles ``pyspark/worker.py``; nothing is imported."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return "PySpark is not installed"
    path = os.path.join(next(iter(spec.submodule_search_locations)), "worker.py")
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        code = compile(source, path, "exec")
    except (OSError, SyntaxError) as exc:
        return f"PySpark's worker ({path}) could not be read: {exc}"
    if "END_OF_STREAM" not in source:
        return f"PySpark's worker ({path}) has no finish signal (END_OF_STREAM)"
    for nested in _nested_code(code):
        names = set(nested.co_varnames) | set(nested.co_freevars) | set(nested.co_cellvars)
        if nested.co_name in ("process", "main", "invoke_udf") and names & set(STREAM_NAMES):
            return None
    return (
        f"PySpark's worker ({path}) does not read a task's input under a name kafka_direct "
        f"knows ({', '.join(STREAM_NAMES)})"
    )


def check_supported() -> None:
    """On the driver: raise when a write task could not tell a complete input from a cut-off
    one with this PySpark (see :func:`unsupported_reason`)."""
    from kafka_direct.errors import ConfigurationError

    reason = unsupported_reason()
    if reason is None:
        return
    import pyspark

    raise ConfigurationError(
        "deliveryGuarantee",
        "exactly-once",
        "a PySpark whose write tasks can tell a complete input from one cut off by an upstream "
        "failure (PySpark 4.2 and 4.3 can)",
        f"With PySpark {pyspark.__version__}: {reason}. A task could then commit part of its "
        "rows after an upstream failure. Use deliveryGuarantee 'at-least-once', or a PySpark "
        "kafka_direct supports.",
    )
