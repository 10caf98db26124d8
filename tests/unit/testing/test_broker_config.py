"""The pure parts of KafkaCluster and the jar cache: rendered configs, coordinates, cache keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_direct.errors import KafkaDirectError
from kafka_direct.testing import jars
from kafka_direct.testing.broker_config import (
    KAFKA_VERSION,
    jvm_options,
    kafka_coordinates,
    log4j2_properties,
    normalize_broker_config,
    server_properties,
)
from kafka_direct.testing.jars import JarFetchError, cache_key, ivy_module_xml
from kafka_direct.testing.kafka_cluster import (
    KAFKA_VERSION_ENV,
    KafkaCluster,
    KafkaClusterError,
    default_kafka_version,
)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def _render(size: int, overrides: dict[str, str] | None = None) -> dict[str, str]:
    voters = {i: 9000 + i for i in range(1, size + 1)}
    return _props(
        server_properties(
            node_id=2 if size > 1 else 1,
            port=8000,
            controller_port=9000 + (2 if size > 1 else 1),
            voters=voters,
            data_dir=Path("/d"),
            overrides=overrides,
        )
    )


@pytest.mark.parametrize(
    ("size", "replicas", "min_isr"),
    [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")],
)
def test_replication_follows_the_cluster_size(size: int, replicas: str, min_isr: str) -> None:
    props = _render(size)
    assert props["default.replication.factor"] == replicas
    assert props["offsets.topic.replication.factor"] == replicas
    assert props["transaction.state.log.replication.factor"] == replicas
    assert props["share.coordinator.state.topic.replication.factor"] == replicas
    assert props["min.insync.replicas"] == min_isr
    assert props["transaction.state.log.min.isr"] == min_isr
    assert props["share.coordinator.state.topic.min.isr"] == min_isr


def test_a_node_is_a_combined_kraft_node_on_loopback_with_a_static_quorum() -> None:
    props = _render(3)
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:8000,CONTROLLER://127.0.0.1:9002"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:8000"
    assert props["log.dirs"] == "/d"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_overrides_win_over_the_defaults_and_add_new_keys() -> None:
    props = _render(1, {"min.insync.replicas": "1", "log.retention.ms": "500"})
    assert props["min.insync.replicas"] == "1"
    assert props["log.retention.ms"] == "500"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"log_retention_ms": 500}, {"log.retention.ms": "500"}),
        ({"auto.create.topics.enable": False}, {"auto.create.topics.enable": "false"}),
        ({"delete_topic_enable": True}, {"delete.topic.enable": "true"}),
        ({"log.cleanup.policy": "compact"}, {"log.cleanup.policy": "compact"}),
    ],
)
def test_keyword_names_become_kafka_names(
    given: dict[str, object], expected: dict[str, str]
) -> None:
    assert normalize_broker_config(given) == expected


def test_a_none_value_is_refused_with_the_property_name() -> None:
    with pytest.raises(ValueError, match=r"'log\.retention\.ms'"):
        normalize_broker_config({"log_retention_ms": None})


def test_the_broker_brings_its_own_slf4j_binding() -> None:
    assert kafka_coordinates("4.1.1") == [
        "org.apache.kafka:kafka_2.13:4.1.1",
        "org.apache.logging.log4j:log4j-api:2.24.3",
        "org.apache.logging.log4j:log4j-core:2.24.3",
        "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
    ]


def test_log4j_writes_to_the_console_which_is_the_broker_log_file() -> None:
    props = _props(log4j2_properties())
    assert props["rootLogger.appenderRef.out.ref"] == "OUT"
    assert props["appender.out.type"] == "Console"


def test_jvm_options_size_the_heap() -> None:
    assert jvm_options(448)[:4] == [
        "-Xmx448m",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
    ]
    assert jvm_options(32)[:2] == ["-Xmx32m", "-Xms32m"]


def test_cache_key_is_by_name_and_content_not_order() -> None:
    a = cache_key(["g:a:1", "g:b:2"], "kafka-4.1.1")
    assert a == cache_key(["g:b:2", "g:a:1"], "kafka-4.1.1")
    assert a.startswith("kafka-4.1.1-") and len(a) == len("kafka-4.1.1-") + 12
    assert a != cache_key(["g:a:1", "g:b:3"], "kafka-4.1.1")
    assert a != cache_key(["g:a:1", "g:b:2"], "other")


@pytest.mark.parametrize(
    ("coordinates", "name", "message"),
    [
        ([], "x", "at least one Maven coordinate"),
        (["org.apache.kafka:kafka_2.13"], "x", "expected 'group:artifact:version'"),
        (["g:a:1:extra"], "x", "expected 'group:artifact:version'"),
        (["g:a:1"], "../up", "Invalid cache_name '../up'"),
    ],
)
def test_bad_coordinates_and_names_are_refused(
    coordinates: list[str], name: str, message: str
) -> None:
    with pytest.raises(JarFetchError, match=message) as caught:
        cache_key(coordinates, name)
    assert isinstance(caught.value, KafkaDirectError)


def test_ivy_module_depends_on_each_coordinate_in_its_runtime_conf() -> None:
    xml = ivy_module_xml(["org.x:a_2.13:1.0", "org.y:b:2.0"])
    assert '<dependency org="org.x" name="a_2.13" rev="1.0" conf="default->default"/>' in xml
    assert '<dependency org="org.y" name="b" rev="2.0" conf="default->default"/>' in xml


def test_cache_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert jars.jar_cache_root() == tmp_path / "kafka_direct" / "jars"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert jars.jar_cache_root() == tmp_path / ".cache" / "kafka_direct" / "jars"


def test_a_complete_cache_is_used_without_java(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    monkeypatch.setenv("PATH", str(tmp_path))
    target = jars.jar_cache_root() / cache_key(["g:a:1"], "n")
    target.mkdir(parents=True)
    (target / "a-1.jar").write_bytes(b"")
    (target / jars.COMPLETE_MARKER).write_text("")
    assert jars.fetch_maven_jars(["g:a:1"], "n") == [target / "a-1.jar"]


def test_a_half_fetched_cache_is_redone_and_a_missing_java_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    monkeypatch.setenv("PATH", str(tmp_path))
    target = jars.jar_cache_root() / cache_key(["g:a:1"], "n")
    target.mkdir(parents=True)
    (target / "a-1.jar").write_bytes(b"")  # no marker: an interrupted fetch
    with pytest.raises(JarFetchError, match=r"^No Java found .* install Java 17") as caught:
        jars.fetch_maven_jars(["g:a:1"], "n")
    assert "\n" not in str(caught.value)
    assert not target.exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (None, KAFKA_VERSION),
        ("", KAFKA_VERSION),
        ("3.9.1", "3.9.1"),
        (" 4.4.0 ", "4.4.0"),
    ],
)
def test_the_kafka_release_comes_from_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch, env: str | None, expected: str
) -> None:
    if env is None:
        monkeypatch.delenv(KAFKA_VERSION_ENV, raising=False)
    else:
        monkeypatch.setenv(KAFKA_VERSION_ENV, env)
    assert default_kafka_version() == expected
    assert KafkaCluster().kafka_version == expected  # nothing starts before start()
    assert KafkaCluster(kafka_version="3.8.0").kafka_version == "3.8.0"


@pytest.mark.parametrize("env", ["latest", "4.4", "kafka-4.4.0", "4.4.0 3.9.1"])
def test_a_malformed_kafka_release_in_the_environment_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.setenv(KAFKA_VERSION_ENV, env)
    with pytest.raises(KafkaClusterError) as caught:
        KafkaCluster()
    message = str(caught.value)
    assert f"KAFKA_DIRECT_KAFKA_VERSION={env!r}" in message
    assert "such as 3.9.1" in message and "unset it" in message
