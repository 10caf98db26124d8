"""Offsets and offset ranges, and their JSON form. Pure: plain library, no Spark, no Kafka client.

The JSON is Spark's (``spark-sql-kafka-0-10`` ``JsonUtils``)::

    {"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}

The value is the *next* offset to read. In starting/ending options, ``-2`` means earliest and
``-1`` means latest. The same shape is the stream reader's checkpointed offset, so a query's
offset log reads exactly like one written by Spark's own Kafka source.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka_direct.errors import ConfigurationError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetRange",
    "PartitionOffsets",
    "TopicPartition",
    "offsets_from_json",
    "offsets_to_json",
    "parse_assign",
    "parse_offsets_option",
    "parse_ranges_option",
    "parse_timestamps_option",
    "ranges_to_json",
]

EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    """A Kafka topic-partition. Ordered by topic, then partition, as Spark orders them."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic-partition: Spark's ``OffsetRange``.

    ``count()`` is an upper bound, not a promise: transaction markers, aborted records and
    compaction leave gaps, so a range may hold fewer records than ``until - from``.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise ConfigurationError(
                "OffsetRange",
                f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})",
                "0 <= fromOffset <= untilOffset",
            )

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    # camelCase aliases mirror Spark's OffsetRange for users coming from Scala.
    @property
    def fromOffset(self) -> int:
        return self.from_offset

    @property
    def untilOffset(self) -> int:
        return self.until_offset

    def topicPartition(self) -> TopicPartition:
        """Spark's ``OffsetRange.topicPartition()``: this range's partition."""
        return self.topic_partition

    @classmethod
    def create(
        cls,
        topic: str | TopicPartition,
        partition: int,
        fromOffset: int,
        untilOffset: int | None = None,
    ) -> OffsetRange:
        """Spark's ``OffsetRange.create``: ``create(topic, partition, fromOffset, untilOffset)``
        or ``create(topicPartition, fromOffset, untilOffset)``."""
        if isinstance(topic, TopicPartition):
            if untilOffset is not None:
                raise ConfigurationError(
                    "OffsetRange.create",
                    f"{topic}, {partition}, {fromOffset}, {untilOffset}",
                    "(topicPartition, fromOffset, untilOffset) or "
                    "(topic, partition, fromOffset, untilOffset)",
                )
            return cls(topic.topic, topic.partition, partition, fromOffset)
        if untilOffset is None:
            raise ConfigurationError(
                "OffsetRange.create",
                f"{topic}, {partition}, {fromOffset}",
                "(topic, partition, fromOffset, untilOffset) or "
                "(topicPartition, fromOffset, untilOffset)",
            )
        return cls(topic, partition, fromOffset, untilOffset)

    def count(self) -> int:
        return self.until_offset - self.from_offset

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})"


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{tp: offset}`` → Spark's JSON-ready dict, topics and partitions in sorted order."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(obj: Mapping[str, Any], option: str = "offset") -> PartitionOffsets:
    """Spark's offset dict (already parsed JSON) → ``{tp: offset}``, validating its shape."""
    expected = 'a JSON object of topics to {"partition": offset} objects, e.g. {"t": {"0": 42}}'
    if not isinstance(obj, Mapping):
        raise ConfigurationError(option, obj, expected)
    result: PartitionOffsets = {}
    for topic, parts in obj.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, Mapping):
            raise ConfigurationError(option, obj, expected)
        for part, value in parts.items():
            partition = _partition_number(part, option, obj, expected)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigurationError(option, obj, expected + " with integer offsets")
            result[TopicPartition(topic, partition)] = value
    return result


def _partition_number(part: object, option: str, obj: object, expected: str) -> int:
    try:
        partition = int(str(part))
    except ValueError:
        raise ConfigurationError(option, obj, expected + " with integer partitions") from None
    if partition < 0:
        raise ConfigurationError(option, obj, expected + " with partitions >= 0")
    return partition


def _load_json(text: str, option: str, expected: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            option, text, expected, f"The JSON is malformed: {exc.msg} at character {exc.pos}."
        ) from None


def parse_offsets_option(text: str, option: str, *, allow_latest: bool = True) -> PartitionOffsets:
    """Parse ``startingOffsets``/``endingOffsets`` JSON. ``-2``/``-1`` keep their meaning."""
    expected = 'per-partition JSON such as {"topic": {"0": 23, "1": -2}}'
    offsets = offsets_from_json(_load_json(text, option, expected), option)
    for tp, value in offsets.items():
        if value < EARLIEST or (value == LATEST and not allow_latest):
            allowed = "an offset >= 0 or -2 (earliest)"
            if allow_latest:
                allowed = "an offset >= 0, -2 (earliest) or -1 (latest)"
            raise ConfigurationError(option, text, f"{allowed} for {tp}")
    return offsets


def parse_timestamps_option(text: str, option: str) -> PartitionOffsets:
    """Parse ``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp``: ms since the epoch."""
    expected = 'per-partition JSON of epoch milliseconds such as {"topic": {"0": 1700000000000}}'
    stamps = offsets_from_json(_load_json(text, option, expected), option)
    for tp, value in stamps.items():
        if value < 0:
            raise ConfigurationError(option, text, f"a timestamp >= 0 for {tp}")
    return stamps


def parse_assign(text: str, option: str = "assign") -> list[TopicPartition]:
    """Parse ``assign``: ``{"topicA": [0, 1], "topicB": [2]}`` → sorted topic-partitions."""
    expected = 'JSON of topics to partition lists such as {"topicA": [0, 1]}'
    obj = _load_json(text, option, expected)
    if not isinstance(obj, dict) or not obj:
        raise ConfigurationError(option, text, expected)
    tps: set[TopicPartition] = set()
    for topic, parts in obj.items():
        if not topic or not isinstance(parts, list) or not parts:
            raise ConfigurationError(option, text, expected + " with a non-empty list per topic")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise ConfigurationError(option, text, expected + " with partitions >= 0")
            tps.add(TopicPartition(topic, part))
    return sorted(tps)


def ranges_to_json(ranges: Iterable[OffsetRange]) -> list[dict[str, Any]]:
    """Offset ranges as JSON-ready dicts, in Spark's ``OffsetRange`` field names (the
    ``offsetRanges`` source option, which the DStream-style API builds its batches with)."""
    return [
        {
            "topic": r.topic,
            "partition": r.partition,
            "fromOffset": r.from_offset,
            "untilOffset": r.until_offset,
        }
        for r in ranges
    ]


def parse_ranges_option(text: str, option: str = "offsetRanges") -> list[OffsetRange]:
    """Parse ``offsetRanges``: ``[{"topic": "t", "partition": 0, "fromOffset": 5,
    "untilOffset": 10}, ...]``, the form :func:`ranges_to_json` writes."""
    expected = (
        'a JSON list of ranges such as [{"topic": "t", "partition": 0, "fromOffset": 5, '
        '"untilOffset": 10}]'
    )
    obj = _load_json(text, option, expected)
    if not isinstance(obj, list):
        raise ConfigurationError(option, text, expected)
    ranges: list[OffsetRange] = []
    for item in obj:
        fields = ("topic", "partition", "fromOffset", "untilOffset")
        if not isinstance(item, dict) or set(item) != set(fields):
            raise ConfigurationError(option, item, expected + " (exactly these four fields)")
        numbers = [item[f] for f in fields[1:]]
        if (
            not isinstance(item["topic"], str)
            or not item["topic"]
            or any(isinstance(n, bool) or not isinstance(n, int) for n in numbers)
        ):
            raise ConfigurationError(option, item, expected + " (a topic and three integers)")
        if item["partition"] < 0:
            raise ConfigurationError(option, item, "a partition >= 0")
        ranges.append(OffsetRange(item["topic"], *numbers))
    return ranges
