"""The C fast path's librdkafka log lines go through Python logging, never to stderr.

Regression: the fast path's own librdkafka consumer kept librdkafka's default log callback, so
while a broker was down its ``%3|...|FAIL|...Connection refused`` lines went straight to the
Python worker's stderr (on a local Spark, the user's console), while every other client of the
library sends them to the ``kafka_direct.librdkafka`` logger. These tests use the real extension
and librdkafka against an address where nothing listens; no broker is needed. ``capfd`` sees
file descriptor 2 itself, where librdkafka's own prints land.

The fast path must be available here: without the extension these tests fail rather than pass
on nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from kafka_direct.config.clients import executor_consumer_config
from kafka_direct.consumer import native
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import LIBRDKAFKA_LOG
from kafka_direct.logs import RepeatLimiter

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: every connection attempt is refused
LOGGER = "kafka_direct.librdkafka"


@pytest.fixture(autouse=True)
def librdkafka_debug(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Every librdkafka record at DEBUG, none held back by an earlier test's repeats."""
    assert native.available(), native.status()
    monkeypatch.setattr(LIBRDKAFKA_LOG, "limiter", RepeatLimiter())
    caplog.set_level(logging.DEBUG, logger=LOGGER)


def config(**extra: str) -> dict[str, str]:
    """The executors' config, reconnecting every few ms: many FAIL lines in a short read."""
    user = {
        "bootstrap.servers": UNREACHABLE,
        "reconnect.backoff.ms": "10",
        "reconnect.backoff.max.ms": "50",
        **extra,
    }
    group = f"native-logs-{uuid.uuid4().hex[:8]}"
    return executor_consumer_config(user, group_id=group, isolation_level="read_uncommitted")


def read_unreachable(consumer: Any, until: Any, timeout_s: float = 0.2) -> None:
    """Reads the unreachable partition until ``until()`` or 10 s (the test then fails)."""
    consumer.assign([TopicPartition("nowhere", 0, 0)])
    deadline = time.monotonic() + 10
    while not until() and time.monotonic() < deadline:
        consumer.consume_batch("nowhere", 0, 0, 10, 10, timeout_s)


def records(caplog: pytest.LogCaptureFixture, facility: str = "") -> list[logging.LogRecord]:
    prefix = f"librdkafka {facility}"
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage().startswith(prefix)]


def test_an_unreachable_broker_s_lines_go_to_logging_not_to_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    events = ClientEvents("The executor's Kafka consumer")
    consumer = NativeConsumer(config(), events)
    assert consumer._impl.routes_logs is True
    try:
        read_unreachable(consumer, lambda: records(caplog, "FAIL:"))
    finally:
        consumer.close()
    assert capfd.readouterr().err == ""
    fails = records(caplog, "FAIL:")
    assert fails, "no FAIL line reached the kafka_direct.librdkafka logger"
    # error_cb reports the failure (once, with a hint); the raw line is DEBUG.
    assert {r.levelno for r in fails} == {logging.DEBUG}
    assert f"{UNREACHABLE}/bootstrap: Connect to ipv4#{UNREACHABLE} failed" in fails[0].getMessage()
    assert "Connection refused" in events.summary()


def test_without_routing_the_consumer_is_quiet_not_printing(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The fallback for a librdkafka without the log queue API: log_level 0. The error events
    still come (error_cb is another path), the lines are neither printed nor logged."""
    impl = native._load().Consumer(config(), route_logs=False)
    assert impl.routes_logs is False
    errors: list[tuple[int, str, bool]] = []

    class Reader:
        def assign(self, partitions: list[TopicPartition]) -> None:
            (tp,) = partitions
            impl.assign(tp.topic, tp.partition, tp.offset)

        def consume_batch(self, *args: Any) -> None:
            impl.consume(*args[1:], native.MAX_BATCH_BYTES)
            taken = impl.take_events()
            if taken is not None:
                errors.extend(taken[0])
                assert taken[1:] == ([], 0, 0)  # no line, none dropped

    try:
        read_unreachable(Reader(), lambda: errors)
    finally:
        impl.close()
    assert capfd.readouterr().err == ""
    assert errors, "the error events stopped with the lines"
    assert records(caplog) == []


def test_debug_floods_stay_bounded_and_off_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A user's ``debug`` (thousands of lines a second) and ``log.queue=false`` change neither:
    the lines still go to logging, and more than the extension keeps between two calls are
    counted in one WARNING instead of growing memory."""
    consumer = NativeConsumer(config(debug="all", **{"log.queue": "false"}))
    try:
        read_unreachable(consumer, lambda: records(caplog, "LOGDROP:"), timeout_s=2.0)
    finally:
        consumer.close()
    assert capfd.readouterr().err == ""
    (dropped, *_) = records(caplog, "LOGDROP:")
    assert dropped.levelno == logging.WARNING
    assert "older log line(s) were dropped" in dropped.getMessage()
    facilities = {r.getMessage().split(":")[0] for r in records(caplog)}
    assert len(facilities) > 3  # the debug lines themselves came through, not only the note


def test_lines_can_be_taken_while_another_thread_consumes() -> None:
    """take_events() does not need the consumer to be idle: the callbacks' buffer has a lock."""
    consumer = NativeConsumer(config(debug="broker,protocol"))
    impl = consumer._impl
    consumer.assign([TopicPartition("nowhere", 0, 0)])
    stop = time.monotonic() + 1.5
    lines = 0

    def consume() -> None:
        while time.monotonic() < stop:
            impl.consume(0, 0, 10, 10, 0.05, native.MAX_BATCH_BYTES)

    reader = threading.Thread(target=consume)
    reader.start()
    try:
        while reader.is_alive():
            taken = impl.take_events()
            if taken is not None:
                lines += len(taken[1])
    finally:
        reader.join()
        consumer.close()
    assert lines > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
def test_a_forked_child_never_touches_the_parent_s_lines() -> None:
    """The lock may have been held by one of the parent's threads at fork time: a child gets
    nothing from take_events() (and close() leaves the parent's handle alone)."""
    consumer = NativeConsumer(config())
    impl = consumer._impl
    try:
        consumer.assign([TopicPartition("nowhere", 0, 0)])
        impl.consume(0, 0, 10, 10, 0.5, native.MAX_BATCH_BYTES)  # lines left in the buffer
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status only
            code = 0 if impl.take_events() is None else 1
            try:
                consumer.close()
            except BaseException:  # noqa: BLE001 - any exception is the child's failure
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        taken = impl.take_events()  # the parent's lines are still there, and its own
        assert taken is not None and taken[1]
    finally:
        consumer.close()
