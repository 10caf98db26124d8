"""The CLI's Kafka clients get the command's settings, and refuse bad ones in one line: topic
creation with --command-config, a setting librdkafka refuses (consume, lag), which cluster
`offsets reset` resolves on, and `produce --help`. No broker: the clients are fakes, or are
refused before they connect."""

from __future__ import annotations

import io
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_direct.cli import build_parser, main
from kafka_direct.cli import offsets as cli_offsets
from kafka_direct.cli.offsets import brokers, reset_cluster
from kafka_direct.cli.produce import _produce
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import TopicPartition
from kafka_direct.testing import topics as topics_module
from tests.unit.cli.test_cli import FakeProducer, _topic
from tests.unit.fake_reader import FakeCluster

SECURED = """\
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="svc" password="s3cret";
"""


def _done(value: Any = None) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


class FakeAdmin:
    """What create_topic uses of AdminClient; a created topic appears in ``cluster``."""

    def __init__(self, config: dict[str, Any], cluster: dict[str, Any]) -> None:
        self.config = config
        self.cluster = cluster

    def create_topics(self, new: list[Any], operation_timeout: float = 0) -> dict[str, Any]:
        for topic in new:
            self.cluster[topic.topic] = _topic(topic.num_partitions)
        return {topic.topic: _done() for topic in new}

    def list_topics(self, timeout: float = -1) -> Any:
        return SimpleNamespace(topics=dict(self.cluster))

    def list_offsets(self, request: dict[Any, Any], request_timeout: float = 0) -> dict[Any, Any]:
        return {tp: _done() for tp in request}


def _fake_admins(monkeypatch: pytest.MonkeyPatch, cluster: dict[str, Any]) -> list[FakeAdmin]:
    made: list[FakeAdmin] = []

    def admin(config: dict[str, Any]) -> FakeAdmin:
        made.append(FakeAdmin(config, cluster))
        return made[-1]

    monkeypatch.setattr(topics_module, "AdminClient", admin)
    return made


# -- 1. produce --partitions creates the topic with --command-config -----------------------------


def test_produce_creates_the_topic_with_the_command_config_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue: the admin client that created the topic had bootstrap.servers only, so on a
    # SASL_SSL cluster the creation timed out.
    config = tmp_path / "client.properties"
    config.write_text(SECURED)
    cluster: dict[str, Any] = {}
    admins = _fake_admins(monkeypatch, cluster)
    args = build_parser().parse_args(
        [
            *("produce", "--bootstrap-servers", "b:9093", "--command-config", str(config)),
            *("--topic", "t", "--partitions", "3", "--records", "6"),
        ]
    )
    made: list[FakeProducer] = []

    def factory(c: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(c, cluster))
        return made[0]

    out = io.StringIO()
    assert _produce(args, out, out, producer_factory=factory) == 0
    [admin] = admins
    assert admin.config["bootstrap.servers"] == "b:9093"
    assert admin.config["security.protocol"] == "SASL_SSL"
    assert (admin.config["sasl.username"], admin.config["sasl.password"]) == ("svc", "s3cret")
    assert "logger" in admin.config  # librdkafka's log goes through logging, as the producer's
    assert "per partition: 0=2 1=2 2=2" in out.getvalue()


def test_create_topic_keeps_working_without_extra_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster: dict[str, Any] = {}
    admins = _fake_admins(monkeypatch, cluster)
    topics_module.create_topic("b:9092", "t", partitions=2, timeout_s=5)
    assert [a.config for a in admins] == [{"bootstrap.servers": "b:9092"}]
    assert set(cluster) == {"t"}


# -- 4. a setting librdkafka refuses: one line, named as the file spells it ---------------------


@pytest.mark.parametrize("command", ["consume", "lag"])
def test_a_refused_command_config_setting_is_one_line_naming_the_files_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # Issue: consume crashed with a traceback (exit 1); lag named the key 'kafka.foo.bar'.
    config = tmp_path / "client.properties"
    config.write_text("foo.bar=1\n")
    argv = [command, *(["t"] if command == "consume" else ["--group", "g"])]
    argv += ["--bootstrap-servers", "127.0.0.1:1", "--command-config", str(config)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kafka-direct: ConfigurationError: Invalid option 'foo.bar': ")
    assert 'No such configuration property: "foo.bar"' in err
    assert "kafka.foo.bar" not in err
    assert err.count("\n") == 1


# -- 2. offsets reset: which cluster the offsets are resolved on ----------------------------------


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("h:9092", {"h:9092"}),
        ("H1:9092, h2", {"h1:9092", "h2:9092"}),  # case, spaces, Kafka's default port
        ("h2:9092,h1:9092,", {"h1:9092", "h2:9092"}),  # order, a trailing comma
        ("SASL_SSL://h:9093", {"h:9093"}),  # a listener prefix
        ("h:09092", {"h:9092"}),
        ("[::1]:9093", {"[::1]:9093"}),
        ("[::1]", {"[::1]:9092"}),
        ("localhost:9092", {"localhost:9092"}),  # names are not resolved
    ],
)
def test_brokers_normalises_a_bootstrap_list(servers: str, expected: set[str]) -> None:
    assert brokers(servers) == expected


@pytest.mark.parametrize(
    ("store", "given", "resolved"),
    [
        ("kafka://k1:9092,k2:9092", None, "k1:9092,k2:9092"),  # the store's address by default
        ("kafka://k1:9092,k2:9092", "K2, k1:9092", "K2, k1:9092"),  # the same brokers
        ("sqlite:///tmp/o.db", "b:9092", "b:9092"),
        ("sqlite:///tmp/o.db", None, None),  # left to --command-config's bootstrap.servers
    ],
)
def test_reset_cluster_defaults_to_a_kafka_store_and_accepts_the_same_brokers(
    store: str, given: str | None, resolved: str | None
) -> None:
    assert reset_cluster(store, given) == resolved


def test_reset_cluster_refuses_another_cluster_than_the_kafka_stores() -> None:
    with pytest.raises(ConfigurationError) as info:
        reset_cluster("kafka://k1:9092", "other:9092")
    assert str(info.value) == (
        "Invalid option '--bootstrap-servers': got 'other:9092', expected the brokers of the "
        "kafka:// store (k1:9092): the offsets are committed there, so they must be resolved "
        "there. Leave out --bootstrap-servers to use the store's address, or name the same "
        "brokers in both."
    )


class _Store:
    def __init__(self) -> None:
        self.saved: list[Any] = []

    def __enter__(self) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def save(self, group: str, ranges: Any) -> None:
        self.saved.append((group, ranges))


def _reset(monkeypatch: pytest.MonkeyPatch, *argv: str) -> SimpleNamespace:
    """Run `offsets reset` on a fake cluster and store; what the reader was built with."""
    from kafka_direct.kafka import offset_reader

    cluster = FakeCluster()
    cluster.create_topic("t", partitions=1, records=5)
    seen = SimpleNamespace(reader_config=None, store=_Store(), store_url=None)

    def reader(config: Any, **kw: Any) -> Any:
        seen.reader_config = dict(config)
        return cluster.reader()

    def store(url: str, security: Any) -> _Store:
        seen.store_url = url
        return seen.store

    monkeypatch.setattr(offset_reader, "AdminOffsetReader", reader)
    monkeypatch.setattr(cli_offsets, "open_store", store)
    seen.code = main(["offsets", "reset", "--group", "g", "--topic", "t", "--to", "latest", *argv])
    return seen


def test_offsets_reset_on_a_kafka_store_resolves_on_the_stores_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue: offsets were resolved on --bootstrap-servers and committed to the store's cluster.
    seen = _reset(monkeypatch, "--store", "kafka://k1:9092")
    assert seen.code == 0
    assert seen.reader_config["bootstrap.servers"] == "k1:9092"
    [(_, ranges)] = seen.store.saved
    assert [(r.topic_partition, r.until_offset) for r in ranges] == [(TopicPartition("t", 0), 5)]
    assert capsys.readouterr().out == "group 'g' now at {\"t-0\": 5}\n"


def test_offsets_reset_refuses_a_kafka_store_on_another_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _reset(monkeypatch, "--store", "kafka://k1:9092", "--bootstrap-servers", "k2:9092")
    assert seen.code == 2
    assert seen.reader_config is None and seen.store.saved == []
    err = capsys.readouterr().err
    assert err.startswith("kafka-direct: ConfigurationError: Invalid option '--bootstrap-servers'")


def test_offsets_reset_on_a_sql_store_needs_bootstrap_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _reset(monkeypatch, "--store", "sqlite:///tmp/never-opened.db")
    assert seen.code == 2
    assert seen.store_url is None
    assert "Pass --bootstrap-servers HOST:PORT." in capsys.readouterr().err


# -- 6. produce --help says what produce does ----------------------------------------------------


def test_produce_help_does_not_promise_lone_last_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue: it said each partition's last record is sent on its own; the code sends none so.
    with pytest.raises(SystemExit):
        main(["produce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "on its own" not in text and "last record" not in text
    assert "Records go out in ordinary batches" in text
