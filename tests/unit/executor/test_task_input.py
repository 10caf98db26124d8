"""How a write task's input ended (kafka_direct.executor.task_input), on a real socket pair and
with a frame that stands where PySpark's worker stands: no Spark, no broker. The Spark end of it
(an upstream failure cutting the input off) is tests/integration/test_sink_upstream_failures.py.
"""

from __future__ import annotations

import importlib.machinery
import io
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.executor import task_input
from kafka_direct.executor.task_input import END_OF_STREAM, InputEnd, input_end

#: A stand-in for PySpark's worker: a frame whose file is ``.../pyspark/worker.py`` holding the
#: task's input stream under the name PySpark 4.3 (``input_data_stream``) or 4.2 (``infile``) uses.
_WORKER = """
def process(input_data_stream, check):
    return check()

def main(infile, check):
    return check()
"""


def _worker(name: str) -> Callable[[Any, Callable[[], InputEnd]], InputEnd]:
    namespace: dict[str, Any] = {}
    exec(compile(_WORKER, "/site-packages/pyspark/worker.py", "exec"), namespace)
    return namespace[name]  # type: ignore[no-any-return]


@pytest.fixture()
def pair() -> Iterator[tuple[socket.socket, io.BufferedReader]]:
    jvm, worker = socket.socketpair()
    # Opened as PySpark's daemon opens the task's socket.
    with open(worker.detach(), "rb", buffering=65536) as reader:
        yield jvm, reader
    jvm.close()


@pytest.mark.parametrize(
    ("sent", "close", "expected"),
    [
        pytest.param(END_OF_STREAM, False, InputEnd.COMPLETE, id="finish signal"),
        pytest.param(END_OF_STREAM + b"\x00\x00", True, InputEnd.COMPLETE, id="signal then more"),
        pytest.param(b"", True, InputEnd.CUT_OFF, id="end of file: cut off"),
        pytest.param(b"\xff\xff\xff\xff", False, InputEnd.UNKNOWN, id="something else"),
        pytest.param(b"\xff\xff", True, InputEnd.UNKNOWN, id="half a signal"),
        pytest.param(b"", False, InputEnd.UNKNOWN, id="nothing in time"),
    ],
)
@pytest.mark.parametrize("frame", ["process", "main"])
def test_what_follows_the_input_decides(
    pair: tuple[socket.socket, io.BufferedReader],
    sent: bytes,
    close: bool,
    expected: InputEnd,
    frame: str,
) -> None:
    jvm, reader = pair
    jvm.sendall(sent)
    if close:
        jvm.shutdown(socket.SHUT_WR)
    assert _worker(frame)(reader, lambda: input_end(wait_s=0.2)) is expected


def test_the_signal_is_peeked_not_consumed(pair: tuple[socket.socket, io.BufferedReader]) -> None:
    jvm, reader = pair
    jvm.sendall(b"data" + END_OF_STREAM)
    assert reader.read(4) == b"data"  # the signal now sits in the reader's buffer
    assert _worker("process")(reader, input_end) is InputEnd.COMPLETE
    assert reader.read(4) == END_OF_STREAM  # PySpark reads it itself afterwards


def test_a_late_signal_is_waited_for(pair: tuple[socket.socket, io.BufferedReader]) -> None:
    jvm, reader = pair
    timer = threading.Timer(0.3, jvm.sendall, args=(END_OF_STREAM,))
    timer.start()
    started = time.monotonic()
    try:
        assert _worker("process")(reader, lambda: input_end(wait_s=10)) is InputEnd.COMPLETE
    finally:
        timer.join()
    assert time.monotonic() - started < 10


def _signal_in_two_writes(pair: tuple[socket.socket, io.BufferedReader]) -> InputEnd:
    """What the task finds when the JVM writes the finish signal's first two bytes, then the
    other two 0.3 s later."""
    jvm, reader = pair
    jvm.sendall(END_OF_STREAM[:2])
    timer = threading.Timer(0.3, jvm.sendall, args=(END_OF_STREAM[2:],))
    timer.start()
    try:
        return _worker("process")(reader, lambda: input_end(wait_s=10))
    finally:
        timer.join()


def test_a_signal_cut_inside_by_the_jvms_write_is_read_whole(
    pair: tuple[socket.socket, io.BufferedReader],
) -> None:
    # Regression (review): a peek returned the two bytes already there, and the task gave up
    # on a complete input (UNKNOWN: an exactly-once task aborted and failed).
    assert _signal_in_two_writes(pair) is InputEnd.COMPLETE


def test_peeking_the_socket_leaves_the_stream_blocking_under_a_default_timeout(
    pair: tuple[socket.socket, io.BufferedReader],
) -> None:
    # Review: a socket object made over the stream's descriptor turns it non-blocking when a
    # process-wide default timeout is set; PySpark's next reads then came back short.
    socket.setdefaulttimeout(10)
    try:
        assert _signal_in_two_writes(pair) is InputEnd.COMPLETE
    finally:
        socket.setdefaulttimeout(None)
    assert os.get_blocking(pair[1].fileno())


def test_the_stream_stays_blocking(pair: tuple[socket.socket, io.BufferedReader]) -> None:
    _, reader = pair
    _worker("process")(reader, lambda: input_end(wait_s=0.05))
    assert os.get_blocking(reader.fileno())


def test_outside_a_pyspark_worker_nothing_is_known() -> None:
    assert input_end(wait_s=0.01) is InputEnd.UNKNOWN


def test_the_installed_pyspark_is_supported() -> None:
    # Pinned: if a PySpark upgrade renames the worker's input, this fails before any user's
    # exactly-once write could commit a cut-off input.
    task_input.unsupported_reason.cache_clear()
    assert task_input.unsupported_reason() is None
    task_input.check_supported()


@pytest.mark.parametrize(
    ("worker", "phrase"),
    [
        pytest.param("def process(stream):\n    pass\n", "no finish signal", id="no signal"),
        pytest.param(
            "END_OF_STREAM = -4\ndef process(stream):\n    pass\n",
            "does not read a task's input under a name",
            id="renamed input",
        ),
    ],
)
def test_an_unknown_worker_refuses_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker: str, phrase: str
) -> None:
    package = tmp_path / "pyspark"
    package.mkdir()
    (package / "worker.py").write_text(worker)
    spec = importlib.machinery.ModuleSpec("pyspark", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(task_input.importlib.util, "find_spec", lambda name: spec)
    task_input.unsupported_reason.cache_clear()
    try:
        assert phrase in (task_input.unsupported_reason() or "")
        with pytest.raises(ConfigurationError) as info:
            task_input.check_supported()
        message = str(info.value)
        assert "deliveryGuarantee" in message and "'at-least-once'" in message
    finally:
        task_input.unsupported_reason.cache_clear()
