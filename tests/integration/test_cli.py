"""The kafka-direct command line against the real broker: in-process through ``cli.main``, and
as a subprocess where stderr, signals or timing are what is being tested.

The same commands without a broker: tests/unit/test_cli_unit.py.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct.cli import main
from kafka_direct.cli.produce import _payloads
from kafka_direct.kafka.groups import commit_group_offsets
from kafka_direct.offsets import TopicPartition as TP
from kafka_direct.producer.partitioning import murmur2_partition
from kafka_direct.testing.broker import EmbeddedBroker, create_topic
from kafka_direct.testing.samples import WORDS
from tests.integration.kafka_helpers import produce_known

CLI = [sys.executable, "-m", "kafka_direct.cli"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, *extra: str) -> int:
    return main(["produce", "--bootstrap-servers", bootstrap, "--topic", topic, *extra])


def read_to_watermark(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 20.0
) -> tuple[list[int], dict[int, list[tuple[bytes | None, bytes]]]]:
    """Each partition's high watermark, and its records (key, value) below it, in order: what a
    reader bounded by "latest" (the source, the lag view) sees."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _name("reader"),
            "enable.auto.commit": "false",
        }
    )
    try:
        highs = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
        seen: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(partitions)}
        todo = {p for p in range(partitions) if highs[p] > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                p, offset, value = msg.partition(), msg.offset(), msg.value()
                assert p is not None and offset is not None and value is not None
                if offset < highs[p]:
                    seen[p].append((msg.key(), value))
                if offset >= highs[p] - 1:
                    todo.discard(p)
        assert not todo, f"partitions {todo} did not reach their watermark"
        return highs, seen
    finally:
        consumer.close()


# -- produce -------------------------------------------------------------------------------------


def test_produce_3000_records_to_3_partitions_are_all_read_up_to_the_watermark(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: 3,000 produced, 1,747 read, on the embedded Tansu broker, whose log end is the
    # start of the last batch. On Kafka the watermark is exact with ordinary batches: produce no
    # longer ends each partition with a one-record batch.
    topic = _name("cli-3k")
    assert _produce(kafka_bootstrap, topic, "--records", "3000", "--partitions", "3") == 0
    captured = capsys.readouterr()
    assert re.fullmatch(
        rf"Delivered 3000 records to topic '{topic}' in \d+\.\d\d s "
        r"\(per partition: 0=1000 1=1000 2=1000\)\n",
        captured.out,
    )
    assert "\r" not in captured.err  # no progress bar redrawn into a pipe

    highs, seen = read_to_watermark(kafka_bootstrap, topic, 3)
    assert highs == [1000, 1000, 1000]
    # Round-robin, in order: partition p holds records p, p+3, p+6, ... of the seeded sample.
    make = _payloads("words", 100, random.Random(42))
    values = [make(i)[1] for i in range(3000)]
    assert all(set(v.decode().split()) <= set(WORDS) for v in values)
    for p in range(3):
        assert seen[p] == [(None, values[i]) for i in range(p, 3000, 3)]


def test_keyed_produce_puts_each_key_where_librdkafkas_murmur2_random_does(
    kafka_bootstrap: str, make_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _name("cli-keyed")
    assert (
        _produce(kafka_bootstrap, topic, "--records", "100", "--partitions", "3", "--kind", "keyed")
        == 0
    )
    capsys.readouterr()

    reference = make_topic(partitions=3, prefix="murmur2-ref")
    placed: dict[bytes | None, int | None] = {}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for k in range(10):
        producer.produce(
            reference,
            key=f"item{k}".encode(),
            value=b"x",
            on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()),
        )
    assert producer.flush(10) == 0
    assert placed == {
        f"item{k}".encode(): murmur2_partition(f"item{k}".encode(), 3) for k in range(10)
    }

    highs, seen = read_to_watermark(kafka_bootstrap, topic, 3)
    expected: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(3)}
    for i in range(100):
        key = f"item{i % 10}".encode()
        expected[murmur2_partition(key, 3)].append((key, f"action{i}".encode()))
    assert seen == expected
    assert highs == [len(expected[p]) for p in range(3)]


def test_produce_to_a_bad_topic_fails_with_the_count_the_cause_and_the_topic(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: a bad topic printed "10/10 records" and exited 0.
    assert _produce(kafka_bootstrap, "bad topic!", "--records", "10") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    # One line on stderr: no progress bar in a pipe, no warnings that repeat the error.
    assert captured.err == (
        "kafka-direct: 10 of 10 records were not delivered to topic 'bad topic!': "
        "Unable to produce message: Local: Unknown topic (_UNKNOWN_TOPIC): 10 records; "
        "metadata for the topic says: Broker: Invalid topic (TOPIC_EXCEPTION)\n"
    )


def _pause_when_records_land(
    broker: EmbeddedBroker, topic: str, records: int, done: threading.Event
) -> None:
    """Freeze ``broker`` once partition 0 of ``topic`` holds ``records``, unless ``done`` first."""
    watcher = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "watermarks"})
    try:
        while not done.is_set():
            _, high = watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            if high >= records:
                broker.pause()
                return
            time.sleep(0.05)
    finally:
        watcher.close()


def test_produce_reports_records_that_time_out_when_the_broker_stops_answering(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A private broker, because this test freezes it (SIGSTOP) in the middle of a run.
    with EmbeddedBroker() as broker:
        topic = _name("cli-paused")
        create_topic(broker.bootstrap_servers, topic, partitions=1)
        # Freeze it once some records are in, not after a fixed second: under load the
        # producer's first acknowledgement can take longer, and then none was delivered.
        done = threading.Event()
        pause = threading.Thread(
            target=_pause_when_records_land, args=(broker, topic, 5, done), daemon=True
        )
        pause.start()
        try:
            code = _produce(
                broker.bootstrap_servers,
                topic,
                *("--records", "40", "--rate", "20", "--timeout", "2"),
            )
        finally:
            done.set()
            pause.join(10)
            broker.resume()
    assert code == 1
    # That --timeout becomes the producer's message.timeout.ms is a unit test's (test_cli.py);
    # here: records that time out are counted and named, whatever the wall clock.
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    failed = re.fullmatch(
        rf"kafka-direct: (\d+) of 40 records were not delivered to topic '{topic}': "
        r"Local: Message timed out \(_MSG_TIMED_OUT\): (\d+) records?",
        last,
    )
    assert failed, last
    assert failed[1] == failed[2]
    delivered = 40 - int(failed[1])
    assert 0 < delivered < 40
    assert "\r" not in err  # no progress bar redraws into a pipe


def test_produce_to_an_unreachable_broker_fails_within_its_timeout_without_client_noise() -> None:
    # The subprocess timeout is a hang guard (librdkafka's own default would wait 5 minutes),
    # not a speed assertion.
    proc = subprocess.run(
        [*CLI, "produce", "--bootstrap-servers", "127.0.0.1:1", "--topic", "t", "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr and "%3|" not in proc.stderr
    lines = proc.stderr.splitlines()
    # One line: no WARNING lines from the client before it that repeat the cause.
    assert len(lines) == 1, proc.stderr
    assert lines[-1].startswith(
        "kafka-direct: KafkaClientError: Could not reach the Kafka cluster at '127.0.0.1:1' "
        "within 2 s to produce to topic 't': "
    )
    assert "Connection refused" in lines[-1]


def _interrupt_when(proc: subprocess.Popen[str], ready: Callable[[str], bool], stream: str) -> None:
    """Send SIGINT (Ctrl-C) once the process has written what ``ready`` waits for."""
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None
    seen = ""
    deadline = time.monotonic() + 30
    while not ready(seen):
        assert time.monotonic() < deadline, seen
        chunk = os.read(pipe.fileno(), 4096).decode()
        assert chunk, f"the process ended before it was interrupted: {seen}"
        seen += chunk
    proc.send_signal(signal.SIGINT)


def _sigint(disposition: signal.Handlers) -> Callable[[], None]:
    """A preexec_fn giving the child ``disposition`` for SIGINT, whatever this process inherited:
    a suite run as a background job or under nohup starts with SIGINT ignored."""

    def restore() -> None:
        signal.signal(signal.SIGINT, disposition)

    return restore


def _interrupt_once_records_land(proc: subprocess.Popen[str], bootstrap: str, topic: str) -> None:
    """Send SIGINT once the topic holds records: the progress bar is drawn on terminals only."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("w")})
    try:
        deadline = time.monotonic() + 30
        while consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] < 5:
            assert proc.poll() is None, "the process ended before it was interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        consumer.close()
    proc.send_signal(signal.SIGINT)


@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
def test_ctrl_c_on_produce_reports_what_was_delivered_and_exits_130(
    kafka_bootstrap: str, inherited: signal.Handlers
) -> None:
    # sigint-ignored: the CLI installs its own Ctrl-C handler, as a nohup'd job would need.
    topic = _name("cli-interrupted")
    create_topic(kafka_bootstrap, topic, partitions=1)
    proc = subprocess.Popen(
        [
            *CLI,
            *("produce", "--bootstrap-servers", kafka_bootstrap, "--topic", topic),
            *("--records", "100000", "--rate", "200", "--timeout", "5"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint(inherited),
    )
    try:
        _interrupt_once_records_land(proc, kafka_bootstrap, topic)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    match = re.fullmatch(
        rf"kafka-direct: interrupted; (\d+) of 100000 records were delivered to topic '{topic}'",
        last,
    )
    assert match, err
    delivered = int(match[1])
    assert 0 < delivered < 100000
    assert out == ""
    # "delivered" means in the topic: read them all back.
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": _name("r"),
            "enable.auto.commit": "false",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 10
        while got < delivered and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
        got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    assert got == delivered


# -- lag -----------------------------------------------------------------------------------------


def test_produce_then_lag_shows_the_describe_view_with_exact_log_ends(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _name("cli")
    group = _name("g")
    args = ["--bootstrap-servers", kafka_bootstrap]
    assert (
        _produce(kafka_bootstrap, topic, "--records", "40", "--partitions", "2", "--kind", "keyed")
        == 0
    )
    assert "\r" not in capsys.readouterr().err  # no progress bar redrawn into a pipe
    # Keys item0..item9, four records each, placed by murmur2.
    ends = [
        4 * sum(1 for k in range(10) if murmur2_partition(f"item{k}".encode(), 2) == p)
        for p in range(2)
    ]
    assert sum(ends) == 40

    commit_group_offsets({"bootstrap.servers": kafka_bootstrap}, group, {TP(topic, 0): 3})
    assert main(["lag", *args, "--group", group, "--topic", topic]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split() for line in table] == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"],
        [group, topic, "0", "3", str(ends[0]), str(ends[0] - 3)],
        [group, topic, "1", "-", str(ends[1]), "-"],
        ["total", "lag:", str(ends[0] - 3)],
    ]


def test_lag_watch_into_a_pipe_prints_timestamped_tables(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _name("cli-watch")
    group = _name("g")
    produce_known(kafka_bootstrap, topic, per_partition=5)
    commit_group_offsets({"bootstrap.servers": kafka_bootstrap}, group, {TP(topic, 0): 2})
    argv = ["lag", "--bootstrap-servers", kafka_bootstrap, "--group", group]
    assert main([*argv, "--watch", "0.2", "--count", "2"]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert len(blocks) == 2
    for block in blocks:
        lines = block.rstrip("\n").splitlines()
        assert re.fullmatch(
            rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d  group '{group}', every 0.2 s "
            r"\(Ctrl-C to stop\)",
            lines[0],
        )
        assert [line.split() for line in lines[1:]] == [
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"],
            [group, topic, "0", "2", "5", "3"],
            ["total", "lag:", "3"],
        ]


@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
def test_ctrl_c_on_lag_watch_exits_130_with_one_line(
    kafka_bootstrap: str, inherited: signal.Handlers
) -> None:
    proc = subprocess.Popen(
        [
            *CLI,
            "lag",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--group",
            _name("g"),
            "--watch",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint(inherited),
    )
    try:
        _interrupt_when(proc, lambda out: "has no committed offsets" in out, "stdout")
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "kafka-direct: interrupted\n"


def test_lag_against_an_unreachable_broker_fails_fast_in_one_line_without_client_noise() -> None:
    proc = subprocess.run(
        [*CLI, "lag", "--bootstrap-servers", "127.0.0.1:1", "--group", "g", "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard, not a speed assertion
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[-1].startswith("kafka-direct: KafkaClientError: ")
    assert "127.0.0.1:1" in lines[-1] and "Connection refused" in lines[-1]


# -- offsets -------------------------------------------------------------------------------------


@pytest.fixture()
def two_partitions_of_five(kafka_bootstrap: str, make_topic: Callable[..., str]) -> str:
    topic = make_topic(partitions=2, prefix="cli-offsets")
    produce_known(kafka_bootstrap, topic, per_partition=5, partitions=2)
    return topic


def test_offsets_reset_then_show_for_sqlite_and_kafka_stores(
    kafka_bootstrap: str,
    two_partitions_of_five: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = two_partitions_of_five
    group = _name("g")
    for store in (f"sqlite:///{tmp_path}/offsets.db", f"kafka://{kafka_bootstrap}"):
        if store.startswith("sqlite"):
            # show never creates a store: the file comes with the first reset.
            assert main(["offsets", "show", "--store", store, "--group", group]) == 2
            assert "No such store" in capsys.readouterr().err
            assert not (tmp_path / "offsets.db").exists()
        else:
            assert main(["offsets", "show", "--store", store, "--group", group]) == 0
            assert capsys.readouterr().out == f"group '{group}' has no stored offsets\n"
        reset = [
            *("offsets", "reset", "--store", store, "--group", group, "--topic", topic),
            *("--bootstrap-servers", kafka_bootstrap),
        ]
        assert main([*reset, "--to", f'{{"{topic}": {{"0": 2, "1": -1}}}}']) == 0
        assert (
            capsys.readouterr().out
            == f'group \'{group}\' now at {{"{topic}-0": 2, "{topic}-1": 5}}\n'
        )
        assert main(["offsets", "show", "--store", store, "--group", group]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()[-2:]]
        assert rows == [[topic, "0", "2"], [topic, "1", "5"]]
        assert main([*reset, "--to", "earliest"]) == 0
        assert (
            capsys.readouterr().out
            == f'group \'{group}\' now at {{"{topic}-0": 0, "{topic}-1": 0}}\n'
        )


@pytest.mark.parametrize(
    ("to", "message"),
    [
        (
            '{{"{topic}": {{"0": 1, "2": 0}}}}',
            "got '{topic}-2', expected a partition that exists: topic '{topic}' has partitions "
            "0-1. Remove {topic}-2 from the JSON, or check the partition number.",
        ),
        (
            '{{"{topic}": {{"0": 1}}, "{other}": {{"0": 0}}}}',
            "got '{other}-0', expected only partitions of the topics given with --topic "
            "({topic}). Add '--topic {other}', or remove {other}-0 from the JSON.",
        ),
        (
            '{{"{topic}": {{"1": 6}}}}',
            "got '{topic}-1: 6', expected an offset <= the log end offset 5 of {topic}-1. "
            "Use -1 for latest, or a smaller offset.",
        ),
    ],
)
def test_offsets_reset_refuses_partitions_and_offsets_the_topic_does_not_have(
    kafka_bootstrap: str,
    two_partitions_of_five: str,
    make_topic: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    to: str,
    message: str,
) -> None:
    # Regression: these were stored as given.
    topic = two_partitions_of_five
    other = make_topic(partitions=1, prefix="cli-other")
    group = _name("g")
    store = f"sqlite:///{tmp_path}/offsets.db"
    argv = [
        *("offsets", "reset", "--store", store, "--group", group, "--topic", topic),
        *("--bootstrap-servers", kafka_bootstrap, "--to", to.format(topic=topic, other=other)),
    ]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "kafka-direct: ConfigurationError: Invalid option '--to': "
        + message.format(topic=topic, other=other)
        + "\n"
    )
    # Nothing was stored: the refused reset did not even create the store.
    assert main(["offsets", "show", "--store", store, "--group", group]) == 2
    assert "No such store" in capsys.readouterr().err


def test_offsets_reset_refuses_a_topic_that_does_not_exist(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = _name("missing")
    argv = [
        *("offsets", "reset", "--store", f"sqlite:///{tmp_path}/o.db", "--group", "g"),
        *("--topic", missing, "--bootstrap-servers", kafka_bootstrap, "--to", "earliest"),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"kafka-direct: ConfigurationError: Invalid option '--topic': got '{missing}', "
        "expected an existing topic. Create it first, or check the name.\n"
    )


def test_offsets_store_url_errors_never_echo_a_password(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["offsets", "show", "--store", "ftp://u:hunter2@h/x", "--group", "g"]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and "hunter2" not in err
