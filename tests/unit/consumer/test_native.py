"""Unit tests for kafka_direct.consumer.native's pure parts: choosing the read path, the failure
type the extension raises, and building Arrow batches from the extension's buffers. No broker,
and no need for the compiled extension: a fake module stands in for it where one is loaded.

``native`` caches its load result in module globals (``_module``, ``_reason``, ``_version``);
every test starts from a fresh, unloaded state, and monkeypatch restores the real one after.
The fast path itself is compared with the Python path in tests/integration/test_native_read.py.
"""

from __future__ import annotations

import logging
import struct
import sys
import types
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import kafka_direct.consumer
from kafka_direct._native import loader
from kafka_direct._native.loader import NativeExtension
from kafka_direct.consumer import native
from kafka_direct.consumer.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, to_record_batch
from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import LIBRDKAFKA_LOG
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.logs import RepeatLimiter
from tests.unit.fakes import FakeMessage, data

EXTENSION = "kafka_direct.consumer._rdkafka_arrow"
LIBRDKAFKA = "/opt/fake/librdkafka.so.1"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class FakeImpl:
    """Stands in for the extension's ``Consumer``: records calls, answers what it is told, and
    hands over the error events and log lines it is given, as ``take_events`` does."""

    def __init__(self, config: dict[str, str]) -> None:
        self.config = config
        self.calls: list[tuple[Any, ...]] = []
        self.events: list[tuple[int, str, bool]] = []
        self.logs: list[tuple[int, str, str]] = []
        self.dropped: tuple[int, int] = (0, 0)  # lines dropped, their worst level
        self.taken = 0  # take_events calls
        self.answer: Any = None
        self.fail: BaseException | None = None

    def _call(self, *call: Any) -> Any:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail
        return self.answer

    def assign(self, topic: str, partition: int, offset: int) -> None:
        self._call("assign", topic, partition, offset)

    def watermarks(self, topic: str, partition: int, timeout_ms: int) -> Any:
        return self._call("watermarks", topic, partition, timeout_ms)

    def consume(self, *args: Any) -> Any:
        return self._call("consume", *args)

    def take_events(self) -> Any:
        self.taken += 1
        if not (self.events or self.logs or self.dropped[0]):
            return None  # as the extension: nothing to hand over, nothing allocated
        taken = (self.events, self.logs, *self.dropped)
        self.events, self.logs, self.dropped = [], [], (0, 0)
        return taken

    def close(self) -> None:
        self.calls.append(("close",))


class FakeExtension(types.ModuleType):
    """Stands in for the compiled ``_rdkafka_arrow`` module."""

    Consumer = FakeImpl

    def __init__(self, load_error: str | None = None, routable: bool = True) -> None:
        super().__init__(EXTENSION)
        self.loaded: list[str] = []
        self.failure: type | None = None
        self.load_error = load_error
        self.routable = routable

    def logs_routable(self) -> bool:
        return self.routable

    def load(self, path: str) -> str:
        self.loaded.append(path)
        if self.load_error is not None:
            raise ImportError(self.load_error)
        return "9.9.9-test"

    def set_failure(self, cls: type) -> None:
        self.failure = cls


@pytest.fixture(autouse=True)
def unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        native, "_extension", NativeExtension(native._import_extension, "consumers")
    )
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)
    monkeypatch.setattr(loader, "librdkafka_path", lambda: LIBRDKAFKA)


def install(monkeypatch: pytest.MonkeyPatch, extension: Any) -> None:
    """Make ``from kafka_direct.consumer import _rdkafka_arrow`` give ``extension`` (None: not
    built). The package attribute counts too: once the real extension was imported (by an
    earlier test), ``from package import name`` finds it there before sys.modules."""
    monkeypatch.setitem(sys.modules, EXTENSION, extension)
    if extension is None:
        monkeypatch.delattr(kafka_direct.consumer, "_rdkafka_arrow", raising=False)
    else:
        monkeypatch.setattr(kafka_direct.consumer, "_rdkafka_arrow", extension, raising=False)


@pytest.fixture()
def extension(monkeypatch: pytest.MonkeyPatch) -> FakeExtension:
    fake = FakeExtension()
    install(monkeypatch, fake)
    return fake


# --- which path, and why --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", " 0 ", "0\n"])
def test_env_var_0_disables_the_fast_path_without_loading_it(
    monkeypatch: pytest.MonkeyPatch, extension: FakeExtension, value: str
) -> None:
    monkeypatch.setenv("KAFKA_DIRECT_NATIVE", value)
    assert native.DISABLE_ENV == "KAFKA_DIRECT_NATIVE"
    assert native.available() is False
    assert native.status() == "Python path: disabled by KAFKA_DIRECT_NATIVE=0"
    assert extension.loaded == []
    with pytest.raises(RuntimeError, match=r"^The fast path is not available: disabled by "):
        native.NativeConsumer({})
    # Decided once per process (a Python worker's environment does not change).
    monkeypatch.delenv("KAFKA_DIRECT_NATIVE")
    assert native.available() is False


@pytest.mark.parametrize("value", [None, "1", "", "false", "00"])
def test_other_values_keep_the_fast_path(
    monkeypatch: pytest.MonkeyPatch, extension: FakeExtension, value: str | None
) -> None:
    if value is not None:
        monkeypatch.setenv("KAFKA_DIRECT_NATIVE", value)
    assert native.available() is True
    assert native.status() == "fast path (librdkafka 9.9.9-test straight into Arrow)"
    assert native.available() is True
    assert extension.loaded == [LIBRDKAFKA]  # loaded once, from confluent-kafka's librdkafka
    assert extension.failure is loader.NativeFailure


def test_without_the_extension_the_python_path_says_it_is_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, None)
    assert native.available() is False
    assert native.status().startswith("Python path: the C extension was not compiled when")


def test_without_librdkafka_the_python_path_says_so(
    monkeypatch: pytest.MonkeyPatch, extension: FakeExtension
) -> None:
    monkeypatch.setattr(loader, "librdkafka_path", lambda: None)
    assert native.available() is False
    assert native.status() == "Python path: confluent-kafka's librdkafka was not found"
    assert extension.loaded == []


def test_a_librdkafka_without_a_needed_symbol_gives_the_loader_s_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, FakeExtension(load_error=f"librdkafka at {LIBRDKAFKA} has no rd_kafka_x"))
    assert native.available() is False
    assert native.status() == f"Python path: librdkafka at {LIBRDKAFKA} has no rd_kafka_x"


# --- failures: the extension raises what confluent-kafka raises ------------------------------


def test_failure_is_a_kafka_exception_carrying_the_code_and_reason() -> None:
    failure = loader.NativeFailure(KafkaError._INVALID_ARG, 'No such configuration property: "x"')
    assert isinstance(failure, KafkaException)
    (error,) = failure.args
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError._INVALID_ARG
    assert error.name() == "_INVALID_ARG"
    assert error.str() == 'No such configuration property: "x"'


@pytest.mark.parametrize(
    ("code", "name", "kind"),
    [
        (KafkaError._INVALID_ARG, "_INVALID_ARG", KafkaClientError),
        (KafkaError._TRANSPORT, "_TRANSPORT", KafkaClientError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, "UNKNOWN_TOPIC_OR_PART", TopicNotFoundError),
        (KafkaError._UNKNOWN_PARTITION, "_UNKNOWN_PARTITION", TopicNotFoundError),
    ],
)
def test_failures_translate_like_confluent_kafka_errors(code: int, name: str, kind: type) -> None:
    with pytest.raises(KafkaClientError) as info, kafka_errors("Consuming t-0 [0, 5)"):
        raise loader.NativeFailure(code, "what librdkafka said")
    assert type(info.value) is kind
    assert str(info.value) == f"Consuming t-0 [0, 5): what librdkafka said ({name})"
    assert info.value.code == name
    assert isinstance(info.value.__cause__, loader.NativeFailure)
    # The same as an exception raised by confluent-kafka itself.
    plain = translate(
        KafkaException(KafkaError(code, "what librdkafka said")), "Consuming t-0 [0, 5)"
    )
    assert (type(plain), str(plain), plain.code) == (kind, str(info.value), info.value.code)


def test_new_consumer_translates_a_refused_config(
    monkeypatch: pytest.MonkeyPatch, extension: FakeExtension
) -> None:
    def refuse(config: dict[str, str]) -> None:
        raise loader.NativeFailure(KafkaError._INVALID_ARG, 'No such configuration property: "x"')

    monkeypatch.setattr(extension, "Consumer", refuse)
    with pytest.raises(KafkaClientError) as info:
        native.new_consumer({"x": "1"}, ClientEvents("test"))
    assert info.value.code == "_INVALID_ARG"
    assert str(info.value) == (
        'Creating a Kafka consumer on the executor: No such configuration property: "x" '
        "(_INVALID_ARG)"
    )


# --- NativeConsumer: the confluent-kafka surface over the extension ---------------------------


def test_consumer_calls_and_events(extension: FakeExtension) -> None:
    events = ClientEvents("The executor's Kafka consumer")
    consumer = native.NativeConsumer({"bootstrap.servers": "b:9092"}, events)
    impl = consumer._impl
    assert impl.config == {"bootstrap.servers": "b:9092"}

    impl.events = [(KafkaError._TRANSPORT, "b:9092/bootstrap: Connection refused", False)]
    consumer.assign([TopicPartition("t", 2, 40)])
    impl.answer = (3, 17)
    assert consumer.get_watermark_offsets(TopicPartition("t", 2), timeout=2.5) == (3, 17)
    assert consumer.get_watermark_offsets(TopicPartition("t", 2), timeout=0.0001) == (3, 17)
    impl.answer = None
    assert consumer.consume_batch("t", 2, 40, 50, 10, 0.2) is None
    impl.answer = (0, None, 44, True, None, None)
    assert consumer.consume_batch("t", 2, 45, 50, 5, 0.2) == (None, 44, True, None, None)
    buffers = (*binary_buffers([b"a", None]), *binary_buffers([b"", b"b"]), i64(46, 48))
    impl.answer = (2, (*buffers, i64(0, 0), i32(0, 0)), 48, False, 49, None)
    batch, *rest = consumer.consume_batch("t", 2, 45, 50, 5, 0.2)
    assert rest == [48, False, 49, None]
    assert batch.column("topic").to_pylist() == ["t", "t"]
    assert batch.column("partition").to_pylist() == [2, 2]
    assert batch.column("offset").to_pylist() == [46, 48]
    consumer.close()
    assert impl.calls == [
        ("assign", "t", 2, 40),
        ("watermarks", "t", 2, 2500),
        ("watermarks", "t", 2, 1),  # never 0 ms: that would not wait at all
        ("consume", 2, 40, 50, 10, 0.2, native.MAX_BATCH_BYTES, False),
        ("consume", 2, 45, 50, 5, 0.2, native.MAX_BATCH_BYTES, False),
        ("consume", 2, 45, 50, 5, 0.2, native.MAX_BATCH_BYTES, False),
        ("close",),
    ]
    assert "Connection refused" in events.summary()
    assert events.config_error() is None


def test_events_are_handed_over_even_when_the_call_fails(extension: FakeExtension) -> None:
    events = ClientEvents("The executor's Kafka consumer")
    consumer = native.NativeConsumer({}, events)
    consumer._impl.events = [
        (KafkaError._SSL, "ssl://b:9093/bootstrap: SSL handshake failed", True)
    ]
    consumer._impl.fail = loader.NativeFailure(KafkaError._FATAL, "fatal")
    with pytest.raises(loader.NativeFailure):
        consumer.consume_batch("t", 0, 0, 5, 5, 0.2)
    error = events.config_error()
    assert error is not None
    assert error.code == "_SSL"


# --- librdkafka's log lines: through logging, like every other client's ----------------------


@pytest.fixture()
def librdkafka_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> pytest.LogCaptureFixture:
    """caplog at DEBUG on the ``kafka_direct.librdkafka`` logger, with no repeat held back from
    an earlier test (the limiter is process-wide)."""
    monkeypatch.setattr(LIBRDKAFKA_LOG, "limiter", RepeatLimiter())
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.logger.name)
    return caplog


def librdkafka_records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "kafka_direct.librdkafka"
    ]


REFUSED = "[thrd:b:9092/bootstrap]: b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed"


def test_log_lines_go_to_the_librdkafka_logger_with_its_rules(
    extension: FakeExtension, librdkafka_log: pytest.LogCaptureFixture
) -> None:
    """Each call hands over the lines librdkafka logged during it, as confluent-kafka's
    ``logger`` would get them: a FAIL line at DEBUG (error_cb reports it), a repeat dropped."""
    events = ClientEvents("The executor's Kafka consumer")
    consumer = native.NativeConsumer({}, events)
    impl = consumer._impl
    impl.logs = [(3, "FAIL", REFUSED), (4, "CONFWARN", "[thrd:app]: Configuration property x")]
    impl.events = [(KafkaError._TRANSPORT, "b:9092/bootstrap: Connection refused", False)]
    assert consumer.consume_batch("t", 0, 0, 5, 5, 0.2) is None
    impl.logs = [(3, "FAIL", REFUSED.replace("10.0.0.1", "10.0.0.2")), (6, "CLOSE", "closed")]
    consumer.close()
    assert librdkafka_records(librdkafka_log) == [
        (logging.DEBUG, f"librdkafka FAIL: {REFUSED}"),
        (logging.WARNING, "librdkafka CONFWARN: [thrd:app]: Configuration property x"),
        (logging.INFO, "librdkafka CLOSE: closed"),  # the close() lines come out too
    ]
    assert "Connection refused" in events.summary()


def test_log_lines_are_handed_over_without_events_and_when_the_call_fails(
    extension: FakeExtension, librdkafka_log: pytest.LogCaptureFixture
) -> None:
    consumer = native.NativeConsumer({})  # no ClientEvents: errors are dropped, lines are not
    consumer._impl.events = [(KafkaError._TRANSPORT, "refused", False)]
    consumer._impl.logs = [(4, "REQTMOUT", "Timed out 1 in-flight request")]
    consumer._impl.fail = loader.NativeFailure(KafkaError._FATAL, "fatal")
    with pytest.raises(loader.NativeFailure):
        consumer.assign([TopicPartition("t", 0, 0)])
    assert librdkafka_records(librdkafka_log) == [
        (logging.WARNING, "librdkafka REQTMOUT: Timed out 1 in-flight request")
    ]
    assert consumer._impl.events == []


def test_lines_dropped_by_the_extension_are_counted_in_a_warning(
    extension: FakeExtension, librdkafka_log: pytest.LogCaptureFixture
) -> None:
    consumer = native.NativeConsumer({})
    consumer._impl.logs = [(7, "FETCH", "the newest line")]
    consumer._impl.dropped = (1200, 3)
    consumer._impl.answer = (0, 10)
    assert consumer.get_watermark_offsets(TopicPartition("t", 0)) == (0, 10)
    assert librdkafka_records(librdkafka_log) == [
        (logging.DEBUG, "librdkafka FETCH: the newest line"),
        (
            logging.WARNING,
            "librdkafka LOGDROP: 1200 older log line(s) were dropped, the most severe of syslog "
            "level 3: more came during one call than the fast path keeps",
        ),
    ]


def test_nothing_to_hand_over_logs_nothing(
    extension: FakeExtension, librdkafka_log: pytest.LogCaptureFixture
) -> None:
    consumer = native.NativeConsumer({}, ClientEvents("c"))
    for _ in range(3):
        assert consumer.consume_batch("t", 0, 0, 5, 5, 0.2) is None
    assert consumer._impl.taken == 3  # one take per call, None each time
    assert librdkafka_log.records == []


@pytest.mark.parametrize("routable", [True, False])
def test_a_librdkafka_without_the_log_queue_api_is_said_at_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, routable: bool
) -> None:
    """The fast path still loads (its consumers run with log_level 0); a DEBUG line says so."""
    install(monkeypatch, FakeExtension(routable=routable))
    with caplog.at_level(logging.DEBUG, logger=loader.__name__):
        assert native.available() is True
    quiet = [r for r in caplog.records if "has no log queue API" in r.getMessage()]
    assert len(quiet) == (0 if routable else 1)


# --- Arrow batches from the extension's buffers ----------------------------------------------


def i32(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def i64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def binary_buffers(values: list[bytes | None]) -> tuple[bytes, bytes, bytes | None]:
    """Arrow binary buffers as the extension fills them: offsets, data, validity (or None)."""
    offsets, bits, at = [0], bytearray((len(values) + 7) // 8), 0
    for i, v in enumerate(values):
        if v is not None:
            at += len(v)
            bits[i // 8] |= 1 << (i % 8)
        offsets.append(at)
    validity = bytes(bits) if None in values else None
    return i32(*offsets), b"".join(v for v in values if v is not None), validity


def test_record_batch_from_hand_made_buffers() -> None:
    columns = (
        i32(0, 2, 2, 2, 5),  # keys b"ab", null, b"", b"xyz"
        b"abxyz",
        bytes([0b1101]),
        i32(0, 0, 1, 1, 1),  # values null, b"v", b"", null
        b"v",
        bytes([0b0110]),
        i64(10, 11, 13, 14),
        i64(1_000, 2_500, 0, -1_000),  # microseconds; -1 ms is "no timestamp"
        i32(0, 1, 0, -1),  # CreateTime, LogAppendTime, CreateTime, not available
    )
    batch = native._record_batch("orders", 3, 4, columns)
    batch.validate(full=True)
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    expected = [
        (b"ab", None, 10, 1_000, 0),
        (None, b"v", 11, 2_500, 1),
        (b"", b"", 13, 0, 0),
        (b"xyz", None, 14, -1_000, -1),
    ]
    assert rows == [
        {
            "key": key,
            "value": value,
            "topic": "orders",
            "partition": 3,
            "offset": offset,
            "timestamp": EPOCH + timedelta(microseconds=us),
            "timestampType": kind,
        }
        for key, value, offset, us, kind in expected
    ]
    assert (batch.column("key").null_count, batch.column("value").null_count) == (1, 2)


@pytest.mark.parametrize("n", [1, 8, 9, 19])
def test_record_batch_equals_the_python_path_s_batch(n: int) -> None:
    """The same records through ``_record_batch`` (buffers, as the extension fills them) and
    through ``rows.to_record_batch`` (confluent-kafka messages) give equal batches; nulls and
    empty values fall on both sides of validity-bitmap byte boundaries."""
    entries = [
        data(
            100 + 2 * i, key=[b"k%d" % i, None, b""][i % 3], value=[None, b"", b"v" * i][i % 4 % 3]
        )
        for i in range(n)
    ]
    python = to_record_batch(
        "orders",
        5,
        [FakeMessage(offset=e.offset, entry=e, topic="orders", partition=5) for e in entries],
        False,
    )
    columns = (
        *binary_buffers([e.key for e in entries]),
        *binary_buffers([e.value for e in entries]),
        i64(*(e.offset for e in entries)),
        i64(*(e.timestamp_ms * 1000 for e in entries)),
        i32(*([0] * n)),  # librdkafka CREATE_TIME (1), less one
    )
    fast = native._record_batch("orders", 5, n, columns)
    fast.validate(full=True)
    assert fast.schema == ARROW_SCHEMA == python.schema
    assert fast.to_pylist() == python.to_pylist()
    assert fast.equals(python)


def test_record_batch_without_nulls_has_no_validity_bitmaps() -> None:
    keys = binary_buffers([b"a", b"", b"c"])
    values = binary_buffers([b"", b"x", b"yy"])
    assert keys[2] is None and values[2] is None
    columns = (*keys, *values, i64(0, 1, 2), i64(0, 0, 0), i32(0, 0, 0))
    batch = native._record_batch("t", 0, 3, columns)
    batch.validate(full=True)
    assert batch.column("key").to_pylist() == [b"a", b"", b"c"]
    assert batch.column("value").to_pylist() == [b"", b"x", b"yy"]
    assert batch.column("key").null_count == batch.column("value").null_count == 0


def test_record_batch_with_headers_from_hand_made_buffers() -> None:
    """Three records: no headers (a null list), two headers (one with a null value), one."""
    columns = (
        *binary_buffers([b"k0", b"k1", b"k2"]),
        *binary_buffers([b"v0", b"v1", b"v2"]),
        i64(0, 1, 2),
        i64(0, 0, 0),
        i32(0, 0, 0),
        (
            bytes([0b110]),  # the first record's list is null
            i32(0, 0, 2, 3),
            i32(0, 1, 2, 4),
            b"abcd",  # keys "a", "b", "cd"
            i32(0, 1, 1, 3),
            b"xyz",  # values b"x", null, b"yz"
            bytes([0b101]),
            3,
        ),
    )
    batch = native._record_batch("t", 0, 3, columns)
    batch.validate(full=True)
    assert batch.schema == ARROW_SCHEMA_WITH_HEADERS
    assert batch.column("headers").to_pylist() == [
        None,
        [{"key": "a", "value": b"x"}, {"key": "b", "value": None}],
        [{"key": "cd", "value": b"yz"}],
    ]
