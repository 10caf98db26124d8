"""What only the C write path has: its checks of the buffers it is given, its refusal of a second
thread and of a forked child, its log lines and error events, and how the write path is chosen.
No broker (an address where nothing listens, or librdkafka's mock cluster), no Spark.

That it writes the same records and raises the same errors as the Python path is
test_batch_producer.py, which runs every producer test on both. The fast path must be available
here: without the extension these tests fail rather than pass on nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from kafka_direct._native import loader
from kafka_direct.config.sink import parse_sink_options
from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.logs import LIBRDKAFKA_LOG
from kafka_direct.logs import RepeatLimiter
from kafka_direct.producer import native
from kafka_direct.producer.columns import plan_columns
from kafka_direct.producer.native import NativeBatchProducer
from kafka_direct.producer.write import WriteSettings, producer_kind

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: every connection attempt is refused
LOGGER = "kafka_direct.librdkafka"
VALUE_ONLY = plan_columns([("value", "binary")], "t")


@pytest.fixture(autouse=True)
def fast_path() -> None:
    assert native.available(), native.status()


def config(**extra: str) -> dict[str, str]:
    options = {"kafka.bootstrap.servers": UNREACHABLE, "topic": "t"}
    options.update({f"kafka.{k}": v for k, v in extra.items()})
    return dict(parse_sink_options(options).producer)


@pytest.fixture
def impl() -> Iterator[Any]:
    """The extension's Producer itself, to hand it buffers a real batch never has."""
    producer = native._load().Producer(config())
    yield producer
    with contextlib.suppress(RuntimeError):  # closed by the test
        producer.purge()
    producer.close()


def binary(n: int, offsets: bytes, data: bytes, validity: bytes | None = None) -> tuple[Any, ...]:
    return (0, n, validity, offsets, data, False)


def int32s(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


# -- the buffers: checked against the lengths before the loop, and every value as it is read --


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (binary(3, int32s(0, 1, 2), b"ab"), "value: offsets buffer of 12 bytes for 3 entries"),
        (binary(2, int32s(0, 1, 2), b"ab", validity=b""), "value: validity bitmap of 0 bytes"),
        ((-1, 1, None, int32s(0, 1), b"a", False), "value: offset -1 and length 1 out of range"),
        (binary(1, int32s(0, 1), b"a"), "a column of 1 rows in a batch of 2"),
    ],
)
def test_buffers_shorter_than_their_lengths_are_refused_before_anything_is_read(
    impl: Any, value: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        impl.produce(2 if "batch of 2" in message else value[1], value, None, "t", None, None,
                     None, 100)  # fmt: skip


@pytest.mark.parametrize(
    "offsets",
    [int32s(0, 1, 1000), int32s(0, 2, 1), int32s(-5, 1, 2)],
    ids=["past the data", "backwards", "negative"],
)
def test_offsets_that_point_outside_the_data_stop_the_write_at_that_row(
    impl: Any, offsets: bytes
) -> None:
    stopped = impl.produce(2, binary(2, offsets, b"ab"), None, "t", None, None, None, 100)
    assert stopped is not None
    kind, row, _code, reason, _topic, _partition = stopped
    assert (kind, reason) == (5, "value offsets out of bounds")
    assert row == (0 if offsets.startswith(int32s(-5)) else 1)


def test_a_malformed_arrow_batch_raises_instead_of_reading_out_of_bounds() -> None:
    # pyarrow's cheap validation of raw buffers does not see offsets that run backwards.
    bad = pa.Array.from_buffers(
        pa.binary(), 2, [None, pa.py_buffer(int32s(0, 2, 1)), pa.py_buffer(b"ab")]
    )
    producer = NativeBatchProducer(config())
    try:
        with pytest.raises(ValueError, match="Row 1 of an Arrow batch is malformed"):
            producer.produce_batch(pa.record_batch([bad], names=["value"]), VALUE_ONLY)
    finally:
        producer.abort()
        producer.close()


def test_a_short_partition_column_and_bad_header_offsets_are_refused(impl: Any) -> None:
    value = binary(2, int32s(0, 1, 2), b"ab")
    with pytest.raises(ValueError, match="partition: data buffer of 4 bytes for 2 entries"):
        impl.produce(2, value, None, "t", None, (0, 2, None, int32s(0)), None, 100)
    keys = binary(1, int32s(0, 1), b"k")
    headers = (0, 2, None, int32s(0, 1, 5), False, 0, 1, None, keys, keys)  # 5 > 1 entry
    stopped = impl.produce(2, value, None, "t", None, None, headers, 100)
    assert stopped is not None and stopped[:2] == (5, 1)
    assert stopped[3] == "header offsets out of bounds"


# -- one thread at a time, never in a forked child, never after close -------------------------


def test_a_second_thread_is_refused_while_the_first_produces() -> None:
    # A one-record queue and no broker: the first thread waits for room until the first record
    # fails by its delivery timeout, which ends its call.
    producer = native._load().Producer(
        config(**{"queue.buffering.max.messages": "1", "delivery.timeout.ms": "1500"})
    )
    values = binary(50, int32s(*range(51)), b"x" * 50)
    result: list[Any] = []
    first = threading.Thread(
        target=lambda: result.append(producer.produce(50, values, None, "t", None, None, None, 8))
    )
    first.start()
    time.sleep(0.3)
    with pytest.raises(RuntimeError, match="in use by another thread"):
        producer.flush(0)
    with pytest.raises(RuntimeError, match="in use by another thread"):
        producer.close()
    first.join(20)
    assert not first.is_alive()
    assert result and result[0][0] == 4  # stopped by the failed delivery
    assert producer.full_waits > 0
    assert producer.delivery_error()[1] == -192  # _MSG_TIMED_OUT
    producer.purge()
    producer.close()


def test_a_forked_child_never_uses_the_parents_producer() -> None:
    producer = native._load().Producer(config())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call refused, and its exit must not hang on the handle
        os.close(read)
        try:
            producer.flush(0)
            answer = b"used"
        except RuntimeError as exc:
            answer = str(exc).encode()
        assert producer.take_events() is None and producer.delivery_error() is None
        producer.close()  # leaves the parent's handle alone
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert answer == b"the producer was created before fork()"
    assert producer.flush(0) == 0  # the parent's is untouched
    producer.close()


def test_a_closed_producer_refuses_calls(impl: Any) -> None:
    impl.close()
    impl.close()  # idempotent
    with pytest.raises(RuntimeError, match="the producer is closed"):
        impl.produce(0, binary(0, int32s(0), b""), None, "t", None, None, None, 1)


# -- logs and error events ---------------------------------------------------------------------


def test_an_unreachable_broker_s_lines_go_to_logging_not_to_stderr(
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(LIBRDKAFKA_LOG, "limiter", RepeatLimiter())
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    producer = NativeBatchProducer(
        config(**{"reconnect.backoff.ms": "10", "reconnect.backoff.max.ms": "50"})
    )
    assert producer._impl.routes_logs is True
    batch = pa.record_batch([pa.array([b"v"])], names=["value"])

    def fails() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == LOGGER and "FAIL" in r.getMessage()]

    try:
        producer.produce_batch(batch, VALUE_ONLY)
        deadline = time.monotonic() + 10
        while not fails() and time.monotonic() < deadline:
            producer._impl.poll(0.1)
            producer._drain()
    finally:
        producer.abort()
        producer.close()
    assert capfd.readouterr().err == ""
    assert fails(), "no FAIL line reached the kafka_direct.librdkafka logger"
    assert f"Connect to ipv4#{UNREACHABLE} failed" in fails()[0].getMessage()
    assert "Connection refused" in producer._events.summary()


# -- which path writes -------------------------------------------------------------------------


@pytest.fixture
def unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh, unloaded module state; monkeypatch restores the real one after the test."""
    monkeypatch.setattr(
        native,
        "_extension",
        loader.NativeExtension(native._import_extension, "producers"),
    )


def settings(fast_path: bool = True) -> WriteSettings:
    opts = parse_sink_options({"kafka.bootstrap.servers": "b:1", "topic": "t"})
    return WriteSettings(opts.producer, VALUE_ONLY, 1000, fast_path=fast_path)


def test_the_fast_path_writes_unless_disabled(unloaded: None) -> None:
    assert producer_kind(settings()) == "native"
    assert producer_kind(settings(fast_path=False)) == "python"
    assert native.status().startswith("fast path (Arrow straight into librdkafka 2.")


def test_the_environment_switch_disables_it_as_for_reads(
    unloaded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert producer_kind(settings()) == "python"
    assert native.status() == "Python path: disabled by KAFKA_DIRECT_NATIVE=0"
    with pytest.raises(RuntimeError, match="not available: disabled by KAFKA_DIRECT_NATIVE=0"):
        NativeBatchProducer(config())


def test_without_librdkafka_the_python_path_says_so(
    unloaded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "librdkafka_path", lambda: None)
    assert producer_kind(settings()) == "python"
    assert native.status() == "Python path: confluent-kafka's librdkafka was not found"


def test_a_refused_config_is_translated_at_creation() -> None:
    with pytest.raises(KafkaClientError) as info:
        NativeBatchProducer({"bootstrap.servers": UNREACHABLE, "acks": "maybe"})
    assert str(info.value).startswith("Creating the Kafka producer on the executor: ")
    assert info.value.code == "_INVALID_ARG"
