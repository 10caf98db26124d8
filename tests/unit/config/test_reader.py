"""The one option reader and the one ``kafka.*`` validator (kafka_direct.config.reader), and that
the source, the sink and the DStream API judge the same mistake with the same words. Pure: no
broker, no Spark."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kafka_direct.config.dstream import validate_params
from kafka_direct.config.reader import OptionReader, kafka_params
from kafka_direct.config.sink import parse_sink_options
from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError

DEFAULTS = {"maxTriggerDelay": "15m", "flag": "true", "count": "3", "mode": "error"}


def reader(**raw: str) -> OptionReader:
    return OptionReader(raw, DEFAULTS, "test")


@pytest.mark.parametrize(
    ("raw", "read", "expected"),
    [
        pytest.param({}, lambda o: o.boolean("flag"), True, id="boolean default"),
        pytest.param({"FLAG": " False "}, lambda o: o.boolean("flag"), False, id="boolean case"),
        pytest.param({}, lambda o: o.integer("count", minimum=0), 3, id="integer default"),
        pytest.param({"count": "0"}, lambda o: o.integer("count", minimum=0), 0, id="integer"),
        pytest.param({}, lambda o: o.optional_int("absent", minimum=1), None, id="optional"),
        pytest.param({}, lambda o: o.duration("maxTriggerDelay"), 900_000, id="duration default"),
        pytest.param({"maxtriggerdelay": "2s"}, lambda o: o.duration("maxTriggerDelay"), 2000,
                     id="duration"),
        pytest.param({"MODE": "LATEST"}, lambda o: o.choice("mode", ("error", "latest")), "latest",
                     id="choice any case"),
        pytest.param({"kafka.sasl.password": " pw "}, lambda o: o.kafka_options(),
                     {"sasl.password": " pw "}, id="kafka options verbatim"),
    ],
)  # fmt: skip
def test_reads(raw: dict[str, str], read: Callable[[OptionReader], Any], expected: Any) -> None:
    assert read(OptionReader(raw, DEFAULTS, "test")) == expected


@pytest.mark.parametrize(
    ("raw", "read", "option", "value", "expected"),
    [
        pytest.param({"flag": "yes"}, lambda o: o.boolean("flag"), "flag", "yes",
                     "'true' or 'false'", id="boolean"),
        pytest.param({"count": "-1"}, lambda o: o.integer("count", minimum=0), "count", "-1",
                     "an integer >= 0", id="integer below minimum"),
        pytest.param({"count": "x"}, lambda o: o.integer("count", minimum=1), "count", "x",
                     "an integer >= 1", id="integer not a number"),
        pytest.param({"maxTriggerDelay": "1y"}, lambda o: o.duration("maxTriggerDelay"),
                     "maxTriggerDelay", "1y", "a duration such as", id="duration"),
        pytest.param({"mode": "some"}, lambda o: o.choice("mode", ("error", "latest", "x")),
                     "mode", "some", "'error', 'latest' or 'x'", id="choice"),
    ],
)  # fmt: skip
def test_refusals_name_the_option_the_value_and_what_was_expected(
    raw: dict[str, str],
    read: Callable[[OptionReader], Any],
    option: str,
    value: str,
    expected: str,
) -> None:
    with pytest.raises(ConfigurationError) as info:
        read(OptionReader(raw, DEFAULTS, "test"))
    assert (info.value.option, info.value.value) == (option, value)
    assert expected in str(info.value)


def test_a_near_miss_is_refused_naming_the_known_option() -> None:
    with pytest.raises(ConfigurationError, match="Did you mean 'maxTriggerDelay'"):
        reader(maxTriggerDelays="1s").refuse_near_misses()
    reader(checkpointLocation="/x", **{"kafka.anything": "1"}).refuse_near_misses()


def test_kafka_params_refuse_an_owned_key_without_showing_a_secret() -> None:
    with pytest.raises(UnsupportedKafkaOptionError) as info:
        kafka_params(
            {"bootstrap.servers": "b:1", "sasl.password": "s3cret"},
            owned={"sasl.password": "Do something else."},
            owner="sink",
        )
    assert info.value.option == "kafka.sasl.password"
    assert "s3cret" not in str(info.value) and "the sink manages it" in str(info.value)


# --- the three APIs: one check, one wording ------------------------------------------------------


def _source(kafka: dict[str, str]) -> None:
    parse_source_options(
        {"subscribe": "t", **{f"kafka.{k}": v for k, v in kafka.items()}}, streaming=True
    )


def _sink(kafka: dict[str, str]) -> None:
    parse_sink_options({"topic": "t", **{f"kafka.{k}": v for k, v in kafka.items()}})


def _dstream(kafka: dict[str, str]) -> None:
    validate_params({"group.id": "g", **kafka})


APIS = [
    pytest.param(_source, "kafka.", id="source"),
    pytest.param(_sink, "kafka.", id="sink"),
    pytest.param(_dstream, "", id="dstream"),
]


@pytest.mark.parametrize(("parse", "prefix"), APIS)
@pytest.mark.parametrize(
    ("kafka", "name", "value", "expected"),
    [
        pytest.param({}, "bootstrap.servers", None, "a comma-separated list of host:port",
                     id="no bootstrap.servers"),
        pytest.param({"bootstrap.servers": " "}, "bootstrap.servers", " ",
                     "a comma-separated list of host:port", id="blank bootstrap.servers"),
        pytest.param({"bootstrap.servers": "b:1", "isolation.level": "serializable"},
                     "isolation.level", "serializable", "'read_committed' or 'read_uncommitted'",
                     id="isolation.level"),
        pytest.param({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
                      "sasl.jaas.config": "x"}, "sasl.jaas.config",
                     "***", "required key=", id="a JAAS line that is not one"),
        pytest.param({"bootstrap.servers": "b:1", "security.protocol": "SASL_SSL",
                      "sasl.client.callback.handler.class": "a.B"},
                     "sasl.client.callback.handler.class", "***", "a librdkafka setting",
                     id="JVM-only setting"),
    ],
)  # fmt: skip
def test_every_api_refuses_the_same_kafka_mistake_with_the_same_words(
    parse: Callable[[dict[str, str]], None],
    prefix: str,
    kafka: dict[str, str],
    name: str,
    value: str | None,
    expected: str,
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(kafka)
    assert info.value.option == prefix + name
    if value != "***":
        assert info.value.value == value
    assert expected in str(info.value)
