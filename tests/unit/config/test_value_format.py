"""The source's ``valueFormat`` options (kafka_direct.config.value_format): table-style, no broker,
no registry, no Spark. Each refusal names the option, the value and what to do."""

from __future__ import annotations

import pytest

from kafka_direct.config.source import parse_source_options
from kafka_direct.config.value_format import ValueFormat
from kafka_direct.errors import ConfigurationError
from kafka_direct.source.value_decode import value_decode

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "orders"}
REGISTRY = {"valueFormat": "avro", "schemaRegistryAddress": "http://registry:8081"}
PREFIX = "confluent.schema.registry."
SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


def parse(**options: str) -> ValueFormat:
    return parse_source_options({**BASE, **options}, streaming=None).value_format


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ValueFormat("binary")),
        ({"valueFormat": "BINARY"}, ValueFormat("binary")),
        (
            REGISTRY,
            ValueFormat(
                "avro",
                registry_address="http://registry:8081",
                subject="orders-value",
                options={"mode": "FAILFAST"},
                subject_by_default=True,
            ),
        ),
        (
            {**REGISTRY, "subject": "clicks-value", "schemaVersion": "3", "mode": "permissive"},
            ValueFormat(
                "avro",
                registry_address="http://registry:8081",
                subject="clicks-value",
                options={"mode": "PERMISSIVE", "schemaVersion": "3"},
                corrupt_column="_corrupt_record",
            ),
        ),
        (
            {**REGISTRY, "jsonFormatSchema": SCHEMA},
            ValueFormat(
                "avro",
                registry_address="http://registry:8081",
                json_format_schema=SCHEMA,
                options={"mode": "FAILFAST"},
            ),
        ),
        (
            {"valueFormat": "avro", "jsonFormatSchema": SCHEMA, "mode": "PERMISSIVE",
             "columnNameOfCorruptRecord": "bad"},
            ValueFormat(
                "avro",
                json_format_schema=SCHEMA,
                options={"mode": "PERMISSIVE"},
                corrupt_column="bad",
            ),
        ),
        (
            {**REGISTRY, f"{PREFIX}basic.auth.user.info": "u:p"},
            ValueFormat(
                "avro",
                registry_address="http://registry:8081",
                subject="orders-value",
                options={"mode": "FAILFAST", f"{PREFIX}basic.auth.user.info": "u:p"},
                subject_by_default=True,
            ),
        ),
        (
            {"valueFormat": "protobuf", "schemaRegistryAddress": "http://r:8081",
             "messageName": "shop.Order"},
            ValueFormat(
                "protobuf",
                registry_address="http://r:8081",
                subject="orders-value",
                message_name="shop.Order",
                options={"mode": "FAILFAST"},
                subject_by_default=True,
            ),
        ),
    ],
    ids=["default", "binary", "subject-by-topic", "subject-version-permissive",
         "reader-schema", "bare-avro", "registry-option", "protobuf"],
)  # fmt: skip
def test_value_format_options(options: dict[str, str], expected: ValueFormat) -> None:
    assert parse(**options) == expected


def test_the_default_subject_follows_an_assign_of_one_topic() -> None:
    found = parse_source_options(
        {"kafka.bootstrap.servers": "b:9092", "assign": '{"t": [0, 1]}', **REGISTRY},
        streaming=None,
    ).value_format
    assert found.subject == "t-value"


@pytest.mark.parametrize(
    ("options", "option", "phrases"),
    [
        ({"valueFormat": "json"}, "valueFormat", ["got 'json'", "'binary', 'avro' or 'protobuf'"]),
        ({"subject": "x"}, "subject", ["'valueFormat' = 'avro'"]),
        ({"mode": "PERMISSIVE"}, "mode", ["'valueFormat' = 'avro'"]),
        (
            {"confluent.schema.registry.basic.auth.user.info": "u:SECRET"},
            "confluent.schema.registry.basic.auth.user.info",
            ["'valueFormat' = 'avro'"],
        ),
        ({"valueFormat": "avro"}, "jsonFormatSchema", ["'schemaRegistryAddress'", "bare Avro"]),
        (
            {"valueFormat": "avro", "jsonFormatSchema": SCHEMA, "subject": "s"},
            "subject",
            ["'schemaRegistryAddress' to be given"],
        ),
        ({**REGISTRY, "mode": "lenient"}, "mode", ["'FAILFAST' or 'PERMISSIVE'"]),
        (
            {**REGISTRY, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": "offset"},
            "columnNameOfCorruptRecord",
            ["not one of the source's own columns"],
        ),
        ({"valueFormat": "protobuf"}, "schemaRegistryAddress", ["Protobuf records are read"]),
        (
            {
                "valueFormat": "protobuf",
                "schemaRegistryAddress": "http://r",
                "jsonFormatSchema": SCHEMA,
            },
            "jsonFormatSchema",
            ["'messageName'"],
        ),
        ({**REGISTRY, "messageName": "Order"}, "messageName", ["'valueFormat' = 'protobuf'"]),
    ],
    ids=["unknown-format", "subject-without-format", "mode-without-format",
         "registry-option-without-format", "nothing-to-decode-with", "subject-without-registry",
         "bad-mode", "corrupt-column-shadows", "protobuf-without-registry",
         "protobuf-with-avro-schema", "message-name-with-avro"],
)  # fmt: skip
def test_refusals_name_the_option_and_the_fix(
    options: dict[str, str], option: str, phrases: list[str]
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(**options)
    message = str(info.value)
    assert f"'{option}'" in message
    for phrase in phrases:
        assert phrase in message
    assert "SECRET" not in message


def test_a_pattern_has_no_default_subject() -> None:
    with pytest.raises(ConfigurationError, match="Set the option 'subject'"):
        parse_source_options(
            {"kafka.bootstrap.servers": "b:9092", "subscribePattern": "o.*", **REGISTRY},
            streaming=None,
        )


USER_INFO = f"{PREFIX}basic.auth.user.info"


@pytest.mark.parametrize(
    ("options", "url", "user_info"),
    [
        ({"schemaRegistryAddress": "https://sruser:SRPASS@registry:8081"},
         "https://registry:8081", "sruser:SRPASS"),
        # the option wins over the URL's, as in from_avro (parse_registry)
        ({"schemaRegistryAddress": "https://sruser:SRPASS@registry:8081",
          USER_INFO: "other:SRPASS2"}, "https://registry:8081", "other:SRPASS2"),
        ({"schemaRegistryAddress": "https://registry:8081"}, "https://registry:8081", None),
    ],
    ids=["url-credentials", "option-wins", "none"],
)  # fmt: skip
def test_no_repr_shows_the_registry_address_credentials(
    options: dict[str, str], url: str, user_info: str | None
) -> None:
    # Review: repr(SourceOptions) showed 'https://sruser:SRPASS@registry:8081'.
    opts = parse_source_options(
        {**BASE, "valueFormat": "avro", "jsonFormatSchema": SCHEMA, **options}, streaming=None
    )
    assert "SRPASS" not in repr(opts) and "sruser" not in repr(opts)
    assert "SRPASS" not in repr(opts.value_format)
    assert opts.value_format.registry_address == url
    assert opts.value_format.options.get(USER_INFO) == user_info
    # the decode still authenticates with them (no registry call: the reader schema is given)
    decode = value_decode(opts.value_format)
    assert decode is not None
    registry = decode.plan.decoder.registry  # type: ignore[attr-defined]
    assert (registry.url, registry.auth.user_info) == (url, user_info)


@pytest.mark.parametrize(
    "address", ["https://sruser:SRPASS@registry:8081", "sruser:SRPASS@registry:8081"]
)
def test_an_address_refused_with_binary_values_is_shown_without_credentials(
    address: str,
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(schemaRegistryAddress=address)
    assert "SRPASS" not in str(info.value) and "sruser" not in str(info.value)
    assert "<redacted>@registry:8081" in str(info.value)
