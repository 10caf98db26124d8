"""Unit tests for kafka_direct.schema_registry.wire: the 5-byte header and subject names."""

from __future__ import annotations

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.errors import WireFormatError
from kafka_direct.schema_registry.wire import header, split_header, subject_name


def test_header_is_magic_byte_and_big_endian_id() -> None:
    assert header(1) == b"\x00\x00\x00\x00\x01"
    assert header(0x01020304) == b"\x00\x01\x02\x03\x04"
    schema_id, payload = split_header(header(258) + b"avro")
    assert (schema_id, bytes(payload)) == (258, b"avro")


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (b"", r"is 0 byte\(s\) long"),
        (b"\x00\x00\x01", r"is 3 byte\(s\) long"),
        (
            b"\x02hello world",
            "starts with byte 0x02,.*first bytes: 02 68 65 6c 6c 6f 20 77 \\.\\.\\.",
        ),
    ],
)
def test_a_record_without_the_header_is_refused_with_its_first_bytes(
    data: bytes, phrase: str
) -> None:
    with pytest.raises(WireFormatError, match=phrase) as info:
        split_header(data, " in row 7 of this batch")
    assert "in row 7 of this batch" in str(info.value)
    assert "PERMISSIVE" in str(info.value)


@pytest.mark.parametrize(
    ("strategy", "topic", "record", "is_key", "subject"),
    [
        ("topic", "orders", None, False, "orders-value"),
        ("topic", "orders", "shop.Order", True, "orders-key"),
        ("record", None, "shop.Order", False, "shop.Order"),
        ("topic-record", "orders", "shop.Order", False, "orders-shop.Order"),
    ],
)
def test_subject_name_strategies_name_subjects_as_confluent_does(
    strategy: str, topic: str | None, record: str | None, is_key: bool, subject: str
) -> None:
    assert subject_name(strategy, topic=topic, record_name=record, is_key=is_key) == subject


@pytest.mark.parametrize(
    ("strategy", "topic", "record", "phrase"),
    [
        ("topics", "t", None, "'subjectNameStrategy'.*one of topic, record, topic-record"),
        ("topic", None, None, "'topic'.*names the subject after it"),
        ("record", "t", None, "'jsonFormatSchema'.*record's full name"),
    ],
)
def test_subject_name_refusals_name_the_option(
    strategy: str, topic: str | None, record: str | None, phrase: str
) -> None:
    with pytest.raises(ConfigurationError, match=phrase):
        subject_name(strategy, topic=topic, record_name=record)
