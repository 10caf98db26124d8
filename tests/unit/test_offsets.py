"""Unit tests for kafka_direct.offsets: table-style, no broker, no Spark.

The offset JSON is Spark's (``JsonUtils.partitionOffsets``): ``{"topic": {"0": 42}}``, the value
being the next offset to read; a checkpoint written by this source must read like Spark's.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
    parse_assign,
    parse_offsets_option,
    parse_timestamps_option,
    ranges_to_json,
)

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
A2 = TopicPartition("a", 2)
A10 = TopicPartition("a", 10)
B0 = TopicPartition("b", 0)


def test_special_offsets_are_sparks() -> None:
    assert (EARLIEST, LATEST) == (-2, -1)


# --- TopicPartition -------------------------------------------------------------------------------


def test_topic_partition_str() -> None:
    assert str(TopicPartition("orders", 3)) == "orders-3"


def test_topic_partition_orders_by_topic_then_partition_number() -> None:
    shuffled = [A10, B0, A2, A0, TopicPartition("B", 5)]
    assert sorted(shuffled) == [TopicPartition("B", 5), A0, A2, A10, B0]


# --- offsets JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offsets", "text"),
    [
        pytest.param({}, "{}", id="empty"),
        pytest.param({A0: 42}, '{"a": {"0": 42}}', id="one partition"),
        pytest.param(
            {B0: -2, A10: 5, A2: 3, A0: 1},
            '{"a": {"0": 1, "2": 3, "10": 5}, "b": {"0": -2}}',
            id="topics sorted, partitions in numeric order",
        ),
        pytest.param(
            {A1: LATEST, A0: EARLIEST}, '{"a": {"0": -2, "1": -1}}', id="special offsets kept"
        ),
        pytest.param({A0: 2**62}, '{"a": {"0": 4611686018427387904}}', id="large offset"),
    ],
)
def test_offsets_json_round_trip(offsets: dict[TopicPartition, int], text: str) -> None:
    as_json = offsets_to_json(offsets)
    assert json.dumps(as_json) == text
    assert offsets_from_json(json.loads(text)) == offsets


def test_offsets_to_json_values_are_plain_ints() -> None:
    class Offset(int):
        pass

    out = offsets_to_json({A0: Offset(7)})
    assert type(out["a"]["0"]) is int


@pytest.mark.parametrize(
    ("obj", "hint"),
    [
        pytest.param([1, 2], "a JSON object of topics", id="a list"),
        pytest.param("a", "a JSON object of topics", id="a string"),
        pytest.param({"": {"0": 1}}, "a JSON object of topics", id="empty topic"),
        pytest.param({"a": [1]}, "a JSON object of topics", id="partitions as a list"),
        pytest.param({"a": 1}, "a JSON object of topics", id="partitions as an int"),
        pytest.param({"a": {"x": 1}}, "with integer partitions", id="partition not a number"),
        pytest.param({"a": {"-1": 1}}, "with partitions >= 0", id="negative partition"),
        pytest.param({"a": {"0": "1"}}, "with integer offsets", id="offset as a string"),
        pytest.param({"a": {"0": 1.0}}, "with integer offsets", id="offset as a float"),
        pytest.param({"a": {"0": True}}, "with integer offsets", id="offset as a boolean"),
        pytest.param({"a": {"0": None}}, "with integer offsets", id="offset null"),
    ],
)
def test_offsets_from_json_refuses(obj: Any, hint: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        offsets_from_json(obj, "myOption")
    message = str(info.value)
    assert info.value.option == "myOption"
    assert message.startswith("Invalid option 'myOption': got ")
    assert repr(obj) in message
    assert hint in message
    assert 'e.g. {"t": {"0": 42}}' in message


def test_offsets_from_json_default_option_name() -> None:
    with pytest.raises(ConfigurationError, match=r"^Invalid option 'offset'"):
        offsets_from_json([])


# --- OffsetRange ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "until", "count"),
    [
        pytest.param(0, 0, 0, id="empty at 0"),
        pytest.param(5, 5, 0, id="empty at 5"),
        pytest.param(0, 1, 1, id="one"),
        pytest.param(10, 110, 100, id="hundred"),
        pytest.param(2**40, 2**41, 2**40, id="large"),
    ],
)
def test_offset_range_count(start: int, until: int, count: int) -> None:
    assert OffsetRange("t", 0, start, until).count() == count


@pytest.mark.parametrize(
    ("start", "until"),
    [
        pytest.param(-1, 5, id="negative from"),
        pytest.param(-2, 5, id="earliest placeholder as from"),
        pytest.param(5, 4, id="until before from"),
        pytest.param(0, -1, id="latest placeholder as until"),
    ],
)
def test_offset_range_refuses_invalid_bounds(start: int, until: int) -> None:
    with pytest.raises(ValueError) as info:
        OffsetRange("orders", 3, start, until)
    message = str(info.value)
    assert "orders-3" in message
    assert f"[{start}, {until})" in message
    assert "0 <= fromOffset <= untilOffset" in message


def test_offset_range_accessors() -> None:
    rng = OffsetRange("orders", 3, 10, 20)
    assert (rng.fromOffset, rng.untilOffset) == (10, 20)
    assert (rng.from_offset, rng.until_offset) == (10, 20)
    assert rng.topic_partition == TopicPartition("orders", 3)
    assert str(rng) == "orders-3 [10, 20)"


def test_offset_range_has_sparks_factory_and_topic_partition() -> None:
    # Spark's OffsetRange.create (both overloads) and topicPartition().
    rng = OffsetRange.create("t", 3, 10, 20)
    assert rng == OffsetRange("t", 3, 10, 20)
    assert rng.topicPartition() == TopicPartition("t", 3)
    assert OffsetRange.create(TopicPartition("t", 3), 10, 20) == rng
    with pytest.raises(ConfigurationError, match=r"OffsetRange\.create"):
        OffsetRange.create("t", 3, 10)
    with pytest.raises(ConfigurationError, match=r"OffsetRange\.create"):
        OffsetRange.create(TopicPartition("t", 3), 10, 20, 30)
    with pytest.raises(ConfigurationError, match="fromOffset <= untilOffset"):
        OffsetRange.create("t", 3, 20, 10)


def test_offset_range_is_frozen_hashable_and_ordered() -> None:
    rng = OffsetRange("b", 0, 1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rng.until_offset = 3  # type: ignore[misc]
    assert {rng, OffsetRange("b", 0, 1, 2)} == {rng}
    ranges = [rng, OffsetRange("a", 1, 0, 5), OffsetRange("a", 0, 7, 9), OffsetRange("a", 0, 3, 9)]
    assert sorted(ranges) == [
        OffsetRange("a", 0, 3, 9),
        OffsetRange("a", 0, 7, 9),
        OffsetRange("a", 1, 0, 5),
        rng,
    ]


def test_ranges_to_json_uses_sparks_camel_case() -> None:
    ranges = [OffsetRange("a", 0, 1, 5), OffsetRange("b", 2, 0, 0)]
    assert ranges_to_json(ranges) == [
        {"topic": "a", "partition": 0, "fromOffset": 1, "untilOffset": 5},
        {"topic": "b", "partition": 2, "fromOffset": 0, "untilOffset": 0},
    ]
    assert json.loads(json.dumps(ranges_to_json(ranges))) == ranges_to_json(ranges)


# --- parse_offsets_option -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "allow_latest", "expected"),
    [
        pytest.param('{"a": {"0": 23, "1": -2}}', False, {A0: 23, A1: -2}, id="earliest in batch"),
        pytest.param('{"a": {"0": -1}}', True, {A0: -1}, id="latest allowed"),
        pytest.param('{"a": {"0": 0}, "b": {"0": 9}}', True, {A0: 0, B0: 9}, id="two topics"),
        pytest.param("{}", True, {}, id="empty"),
        pytest.param(' {"a": {"10": 1}} ', True, {A10: 1}, id="surrounding spaces"),
    ],
)
def test_parse_offsets_option(
    text: str, allow_latest: bool, expected: dict[TopicPartition, int]
) -> None:
    assert parse_offsets_option(text, "startingOffsets", allow_latest=allow_latest) == expected


@pytest.mark.parametrize(
    ("text", "allow_latest", "hint"),
    [
        pytest.param(
            '{"a": {"0": -3}}',
            True,
            "expected an offset >= 0, -2 (earliest) or -1 (latest) for a-0.",
            id="below -2",
        ),
        pytest.param(
            '{"a": {"0": 5, "1": -1}}',
            False,
            "expected an offset >= 0 or -2 (earliest) for a-1.",
            id="latest not allowed",
        ),
        pytest.param(
            '{"a": {"0": 5',
            True,
            "The JSON is malformed: Expecting ',' delimiter at character 13.",
            id="malformed: position",
        ),
        pytest.param(
            "earliest",
            True,
            "The JSON is malformed: Expecting value at character 0.",
            id="not JSON",
        ),
        pytest.param(
            '{"a": {"0": 5}} x',
            True,
            "The JSON is malformed: Extra data at character 16.",
            id="trailing data",
        ),
    ],
)
def test_parse_offsets_option_refuses(text: str, allow_latest: bool, hint: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_offsets_option(text, "endingOffsets", allow_latest=allow_latest)
    message = str(info.value)
    assert isinstance(info.value, KafkaDirectError)
    assert info.value.option == "endingOffsets"
    assert message.startswith(f"Invalid option 'endingOffsets': got {text!r}")
    assert hint in message


def test_malformed_json_error_has_no_chained_decoder_traceback() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_offsets_option("{", "startingOffsets")
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


# --- parse_timestamps_option ----------------------------------------------------------------------


def test_parse_timestamps_option() -> None:
    text = '{"a": {"0": 1700000000000, "1": 0}}'
    assert parse_timestamps_option(text, "startingOffsetsByTimestamp") == {
        A0: 1_700_000_000_000,
        A1: 0,
    }


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        pytest.param('{"a": {"0": -1}}', "a timestamp >= 0 for a-0", id="latest placeholder"),
        pytest.param('{"a": {"0": -2}}', "a timestamp >= 0 for a-0", id="earliest placeholder"),
        pytest.param('{"a": {"0": "now"}}', "with integer offsets", id="not an integer"),
        pytest.param('{"a": {"0": 1}', "Expecting ',' delimiter at character 14", id="malformed"),
    ],
)
def test_parse_timestamps_option_refuses(text: str, hint: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_timestamps_option(text, "endingOffsetsByTimestamp")
    assert info.value.option == "endingOffsetsByTimestamp"
    assert "Invalid option 'endingOffsetsByTimestamp'" in str(info.value)
    assert hint in str(info.value)


# --- parse_assign ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('{"a": [0]}', [A0], id="one"),
        pytest.param('{"b": [0], "a": [10, 2, 0]}', [A0, A2, A10, B0], id="sorted"),
        pytest.param('{"a": [1, 1, 0, 1]}', [A0, A1], id="deduplicated"),
    ],
)
def test_parse_assign(text: str, expected: list[TopicPartition]) -> None:
    assert parse_assign(text) == expected


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        pytest.param("{}", 'such as {"topicA": [0, 1]}.', id="no topics"),
        pytest.param("[0]", 'such as {"topicA": [0, 1]}.', id="a list"),
        pytest.param('{"a": []}', "with a non-empty list per topic", id="empty list"),
        pytest.param('{"a": 0}', "with a non-empty list per topic", id="not a list"),
        pytest.param('{"": [0]}', "with a non-empty list per topic", id="empty topic"),
        pytest.param('{"a": [-1]}', "with partitions >= 0", id="negative"),
        pytest.param('{"a": ["0"]}', "with partitions >= 0", id="string"),
        pytest.param('{"a": [0.0]}', "with partitions >= 0", id="float"),
        pytest.param('{"a": [false]}', "with partitions >= 0", id="boolean"),
        pytest.param('{"a": [0', "Expecting ',' delimiter at character 8", id="malformed"),
    ],
)
def test_parse_assign_refuses(text: str, hint: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_assign(text)
    message = str(info.value)
    assert info.value.option == "assign"
    assert message.startswith(f"Invalid option 'assign': got {text!r}, expected JSON of topics")
    assert hint in message


def test_parse_assign_names_the_option_it_parses() -> None:
    with pytest.raises(ConfigurationError, match=r"^Invalid option 'partitions'"):
        parse_assign("{}", "partitions")
