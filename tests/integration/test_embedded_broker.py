"""The embedded broker launcher against the real Tansu binary: no mocks, no skips."""

from __future__ import annotations

import gc
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_direct.errors import EmbeddedBrokerError, KafkaClientError
from kafka_direct.testing.broker import EmbeddedBroker, create_topic, delete_topic
from kafka_direct.testing.ports import free_port

SRC = Path(__file__).resolve().parents[2] / "src"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _metadata_ok(bootstrap: str, timeout_s: float) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    finally:
        # Tansu drains open connections for ~5 s on SIGTERM; close ours before any stop().
        del admin
        gc.collect()
    return True


def _child_pids(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


def _subprocess_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        yield running


def test_context_manager_starts_answers_metadata_and_leaves_nothing_running() -> None:
    embedded = EmbeddedBroker()
    assert "not started" in repr(embedded)
    with embedded as started:
        assert started is embedded
        pid = embedded.pid
        assert pid is not None
        assert embedded.is_running()
        assert embedded.bootstrap_servers == f"127.0.0.1:{embedded.port}"
        assert f"127.0.0.1:{embedded.port}, running" in repr(embedded)
        assert _metadata_ok(embedded.bootstrap_servers, 10)
        log_path = embedded.log_path
        assert log_path is not None and log_path.exists()
    assert not embedded.is_running()
    assert _gone(pid)
    assert "stopped" in repr(embedded)
    assert not log_path.exists(), "the default temporary log is removed on stop"
    embedded.stop()  # idempotent


def test_bootstrap_servers_before_start_is_an_error() -> None:
    with pytest.raises(EmbeddedBrokerError, match="not started"):
        _ = EmbeddedBroker().bootstrap_servers


def test_produce_ten_records_and_read_them_back_with_assign(broker: EmbeddedBroker) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(9):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
    producer.flush(10)
    # BROKER.md item 1: the last batch must be a single record for the watermark to be exact.
    producer.produce(topic, key=b"k9", value=b"v9", partition=0)
    assert producer.flush(10) == 0
    del producer

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"test-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        records: list[tuple[bytes | None, bytes | None, int | None]] = []
        deadline = time.monotonic() + 15
        while len(records) < 10 and time.monotonic() < deadline:
            for message in consumer.consume(10 - len(records), timeout=1):
                assert message.error() is None, message.error()
                records.append((message.key(), message.value(), message.offset()))
    finally:
        consumer.close()
    assert records == [(f"k{i}".encode(), f"v{i}".encode(), i) for i in range(10)]

    delete_topic(broker.bootstrap_servers, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert topic not in admin.list_topics(timeout=10).topics


def test_create_topic_that_exists_raises_kafka_client_error(broker: EmbeddedBroker) -> None:
    topic = f"twice-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic)
    with pytest.raises(KafkaClientError, match=topic) as raised:
        create_topic(broker.bootstrap_servers, topic)
    assert raised.value.code == "TOPIC_ALREADY_EXISTS"
    delete_topic(broker.bootstrap_servers, topic)


def test_paused_broker_answers_nothing_until_resumed(broker: EmbeddedBroker) -> None:
    broker.pause()
    try:
        assert "paused" in repr(broker)
        assert broker.is_running()
        assert not _metadata_ok(broker.bootstrap_servers, 1)
    finally:
        broker.resume()
    assert "running" in repr(broker)
    assert _metadata_ok(broker.bootstrap_servers, 10)


def test_stop_kills_a_paused_broker() -> None:
    embedded = EmbeddedBroker().start()
    pid = embedded.pid
    assert pid is not None
    embedded.pause()
    embedded.stop(timeout_s=5)
    assert _gone(pid)


def test_binary_that_exits_reports_command_and_log_tail(tmp_path: Path) -> None:
    fake = tmp_path / "fake-tansu"
    fake.write_text('#!/bin/sh\necho "fake broker refusing to start: $*"\nexit 3\n')
    fake.chmod(0o755)
    log = tmp_path / "broker.log"
    with pytest.raises(EmbeddedBrokerError) as raised:
        EmbeddedBroker(binary=str(fake), log_file=log, startup_timeout_s=10).start()
    message = str(raised.value)
    assert "exited with code 3" in message
    assert f"Command: {fake} broker --listener-url tcp://127.0.0.1:" in message
    assert "fake broker refusing to start: broker --listener-url" in message
    assert log.exists(), "a log the caller named is kept"


def test_bin_false_raises_embedded_broker_error(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    with pytest.raises(EmbeddedBrokerError, match=r"(?s)exited with code 1.*Command: /bin/false"):
        EmbeddedBroker(binary="/bin/false", startup_timeout_s=10, log_file=log).start()


def test_missing_binary_raises_embedded_broker_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tansu"
    with pytest.raises(EmbeddedBrokerError, match="Could not run the embedded broker"):
        EmbeddedBroker(binary=str(missing)).start()


def test_fixed_port_taken_by_another_listener_fails_with_broker_log(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(EmbeddedBrokerError, match=f"127.0.0.1:{port}") as raised:
            EmbeddedBroker(port=port, startup_timeout_s=10, log_file=tmp_path / "b.log").start()
    assert "Address in use" in str(raised.value)


def test_forgotten_broker_is_stopped_at_interpreter_exit() -> None:
    script = textwrap.dedent("""
        from kafka_direct.testing.broker import EmbeddedBroker
        print(EmbeddedBroker().start().pid, flush=True)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    pid = int(done.stdout.strip())
    assert _gone(pid)


def test_cli_prints_bootstrap_line_and_exits_zero_on_sigterm() -> None:
    port = free_port()
    cli = subprocess.Popen(
        [sys.executable, "-m", "kafka_direct.testing.broker", "--port", str(port)],
        env=_subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(cli.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=20), "the CLI printed nothing within 20 s"
        assert cli.stdout.readline().strip() == f"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{port}"
        assert _metadata_ok(f"127.0.0.1:{port}", 10)
        children = _child_pids(cli.pid)
        assert len(children) == 1
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=15) == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert _gone(children[0])
