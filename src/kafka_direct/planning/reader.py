"""What planning needs from the cluster: the :class:`OffsetReader` protocol. Pure: plain library.

:class:`kafka_direct.kafka.offset_reader.AdminOffsetReader` implements it on the Kafka
AdminClient; unit tests implement it with a fake cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from kafka_direct.config.kafka import Subscription
from kafka_direct.offsets import PartitionOffsets, TopicPartition

__all__ = ["OffsetReader", "TimestampType"]

#: A topic's ``message.timestamp.type``: set by the producer, or by the broker on append.
TimestampType = Literal["CreateTime", "LogAppendTime"]


class OffsetReader(Protocol):
    """What planning needs from the cluster. Unit tests implement it with a fake."""

    def partitions(self, strategy: Subscription) -> set[TopicPartition]: ...

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets: ...

    def latest(
        self, tps: Iterable[TopicPartition], known: Mapping[TopicPartition, int] | None = None
    ) -> PartitionOffsets: ...

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The first offset with timestamp >= stamp, or -1 where no record is that recent."""
        ...

    def timestamp_types(self, topics: Iterable[str]) -> dict[str, TimestampType]:
        """Each topic's ``message.timestamp.type`` (filter pushdown cuts a range's end by
        timestamp only where the broker stamps records: ``LogAppendTime``)."""
        ...

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """The group's committed offsets; partitions without a commit are absent."""
        ...

    def close(self) -> None: ...
