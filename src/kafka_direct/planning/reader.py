"""What planning needs from the cluster: the :class:`OffsetReader` protocol. Pure: plain library.

:class:`kafka_direct.kafka.offset_reader.AdminOffsetReader` implements it on the Kafka
AdminClient; unit tests implement it with a fake.

Spark's two Kafka APIs name different partitions for the same strategy, so a caller says which
one it mirrors (:class:`SubscriptionRules`): :data:`STRUCTURED` for ``format("kafka")``,
:data:`DSTREAM` for ``spark-streaming-kafka-0-10``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from kafka_direct.config.kafka import Subscription
from kafka_direct.errors import TopicNotFoundError
from kafka_direct.offsets import PartitionOffsets, TopicPartition

__all__ = [
    "DSTREAM",
    "STRUCTURED",
    "OffsetReader",
    "PatternMatch",
    "SubscriptionRules",
    "TimestampType",
    "assigned_partitions",
    "matching_topics",
    "rules_for",
]

log = logging.getLogger(__name__)

#: A topic's ``message.timestamp.type``: set by the producer, or by the broker on append.
TimestampType = Literal["CreateTime", "LogAppendTime"]

#: How a topic pattern picks topics. ``anywhere``: the pattern occurs somewhere in the name
#: (``re.search``); ``whole_name``: it matches the whole name (``re.fullmatch``).
PatternMatch = Literal["anywhere", "whole_name"]


@dataclass(frozen=True)
class SubscriptionRules:
    """Where Spark's Kafka APIs disagree on the partitions a strategy names."""

    #: How ``subscribePattern`` matches topic names.
    pattern: PatternMatch
    #: An assigned partition that its (existing) topic does not have: ``drop`` it until it is
    #: created, or ``refuse`` the read. A topic the cluster does not have is refused either way.
    absent_partitions: Literal["drop", "refuse"]


#: Spark's structured source (``ConsumerStrategy.scala``, read through the AdminClient):
#: ``SubscribePatternStrategy`` keeps a topic when ``topicRegex.findFirstIn(name)`` finds the
#: pattern in it, and ``AssignStrategy`` keeps the assigned partitions that the topics'
#: descriptions list, so one not created yet is read once it is.
STRUCTURED = SubscriptionRules(pattern="anywhere", absent_partitions="drop")
#: Spark Streaming's ``ConsumerStrategies``: ``SubscribePattern`` hands the pattern to
#: ``KafkaConsumer.subscribe(Pattern)``, which keeps a topic when ``matcher(name).matches()``
#: (the whole name). ``Assign`` hands the partitions to ``KafkaConsumer.assign``, and the stream
#: then fails on a missing one (its position times out): refused at once here, with its name.
DSTREAM = SubscriptionRules(pattern="whole_name", absent_partitions="refuse")


def rules_for(strategy: Subscription, rules: SubscriptionRules | None) -> SubscriptionRules:
    """``rules``, which a pattern or an assignment must name: there Spark's APIs differ, and a
    default would pick one of them silently."""
    if rules is None:
        if strategy.kind != "subscribe":
            raise ValueError(
                f"partitions({strategy.describe()}) needs rules=STRUCTURED or rules=DSTREAM: "
                "Spark's structured source and its DStream API name different partitions for it"
            )
        return STRUCTURED  # a subscription names the same partitions under both
    return rules


def matching_topics(pattern: str, names: Iterable[str], match: PatternMatch) -> list[str]:
    """The ``names`` that ``pattern`` picks, as ``match`` says, sorted."""
    compiled = re.compile(pattern)
    picks = compiled.search if match == "anywhere" else compiled.fullmatch
    return sorted(name for name in names if picks(name))


def assigned_partitions(
    assigned: Iterable[TopicPartition],
    topics: Mapping[str, Iterable[int]],
    rules: SubscriptionRules,
) -> set[TopicPartition]:
    """The ``assigned`` partitions that exist, given each existing topic's partitions.

    An assigned topic the cluster does not have fails the read under both APIs, as in Spark
    (the AdminClient's DescribeTopics fails on it, and so does the consumer's position). A
    partition that an existing topic does not have (yet) is left out with a warning, or
    refused, as ``rules`` say."""
    wanted = sorted(set(assigned))
    have = {topic: set(parts) for topic, parts in topics.items()}
    absent = [tp for tp in wanted if tp.topic in have and tp.partition not in have[tp.topic]]
    refused = [tp for tp in wanted if tp.topic not in have]
    if rules.absent_partitions == "refuse":
        refused = sorted(refused + absent)
    if refused:
        raise TopicNotFoundError(
            f"Option 'assign' names {', '.join(map(str, refused))}, which the cluster does not "
            "have. Create the topic (or partitions) first, or fix the 'assign' JSON."
        )
    if absent:
        log.warning(
            "Option 'assign' names %s, which the cluster does not have (yet): read without "
            "them, as Spark's connector does; a stream reads them from their start once "
            "they are created",
            ", ".join(map(str, absent)),
        )
    return set(wanted) - set(absent)


class OffsetReader(Protocol):
    """What planning needs from the cluster. Unit tests implement it with a fake."""

    def partitions(
        self, strategy: Subscription, *, rules: SubscriptionRules | None = None
    ) -> set[TopicPartition]:
        """The partitions ``strategy`` names now. ``rules`` (:data:`STRUCTURED` or
        :data:`DSTREAM`) must be given for ``subscribePattern`` and ``assign``, where Spark's
        APIs differ; a ``subscribe`` alone may leave it out."""
        ...

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
