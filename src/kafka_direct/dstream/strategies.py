"""``LocationStrategies`` and ``ConsumerStrategies`` of the DStream-style direct stream. Pure:
plain library (no Spark, no Kafka client), used by the Spark driver.

The API mirrors Spark's ``spark-streaming-kafka-0-10``::

    ConsumerStrategies.Subscribe(["events"], {"bootstrap.servers": B, "group.id": "g"})
    ConsumerStrategies.SubscribePattern("events-.*", params, {TopicPartition("events-a", 0): 42})
    ConsumerStrategies.Assign([TopicPartition("events", 0)], params)

``params`` are librdkafka keys, as the Scala API takes Java client keys; most are the same names
(:func:`kafka_direct.config.dstream.validate_params`). Where a stream starts, and where
partitions that appear later start, follows the one set of rules of
:mod:`kafka_direct.planning.resolve` (see :mod:`kafka_direct.dstream.planner`).

Location strategies are accepted for API parity only: PySpark cannot give Python tasks
preferred locations, so every strategy behaves as ``PreferConsistent``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kafka_direct.config.dstream import AutoOffsetReset, validate_params
from kafka_direct.config.kafka import KafkaConfig, Subscription
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.planning.reader import DSTREAM, matching_topics

__all__ = [
    "ConsumerStrategies",
    "ConsumerStrategy",
    "LocationStrategies",
    "LocationStrategy",
    "warn_if_ignored",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocationStrategy:
    """Where Spark should run each partition's task. Advisory only under PySpark (see module)."""

    kind: Literal["PreferConsistent", "PreferBrokers", "PreferFixed"]
    host_map: Mapping[TopicPartition, str] = field(default_factory=dict)


_warned_fixed = threading.Event()


def warn_if_ignored(location: LocationStrategy) -> None:
    """Say once per process that a host map cannot be honoured (PySpark has no preferred hosts)."""
    if location.kind == "PreferFixed" and not _warned_fixed.is_set():
        _warned_fixed.set()
        log.warning(
            "LocationStrategies.PreferFixed is accepted but has no effect: PySpark cannot give "
            "Python tasks preferred locations, so partitions are scheduled as with "
            "PreferConsistent."
        )
    elif location.kind == "PreferBrokers":
        log.info("LocationStrategies.PreferBrokers behaves as PreferConsistent under PySpark")


class LocationStrategies:
    """Spark's ``LocationStrategies`` factory. All three behave as ``PreferConsistent``."""

    @staticmethod
    def PreferConsistent() -> LocationStrategy:
        return LocationStrategy("PreferConsistent")

    @staticmethod
    def PreferBrokers() -> LocationStrategy:
        return LocationStrategy("PreferBrokers")

    @staticmethod
    def PreferFixed(hostMap: Mapping[Any, str]) -> LocationStrategy:
        hosts: dict[TopicPartition, str] = {}
        for key, host in dict(hostMap).items():
            tp = _topic_partition(key, "hostMap")
            if not isinstance(host, str) or not host:
                raise ConfigurationError("hostMap", {str(tp): host}, "a host name per partition")
            hosts[tp] = host
        return LocationStrategy("PreferFixed", hosts)


@dataclass(frozen=True)
class ConsumerStrategy:
    """Which partitions a stream reads, with what client settings, starting where.

    ``kafka`` holds the connection settings handed to the driver's admin client and to executors
    (``group.id``, ``auto.offset.reset`` and ``enable.auto.commit`` are taken out: the stream
    handles them). ``offsets`` are the explicit starting offsets given to the strategy.
    """

    name: Literal["Subscribe", "SubscribePattern", "Assign"]
    subscription: Subscription
    kafka: KafkaConfig
    group_id: str
    auto_offset_reset: AutoOffsetReset
    offsets: PartitionOffsets

    @property
    def isolation_level(self) -> str:
        return self.kafka.get("isolation.level", "read_uncommitted")

    def describe(self) -> str:
        return f"{self.name}({self.subscription.describe()}, group.id={self.group_id})"


class ConsumerStrategies:
    """Spark's ``ConsumerStrategies`` factory: ``Subscribe``, ``SubscribePattern``, ``Assign``."""

    @staticmethod
    def Subscribe(
        topics: Iterable[str] | str,
        kafkaParams: Mapping[str, Any],
        offsets: Mapping[Any, int] | None = None,
    ) -> ConsumerStrategy:
        """Subscribe to a list of topics (a string is a comma-separated list)."""
        if isinstance(topics, str):
            topics = topics.split(",")
        names = tuple(dict.fromkeys(t.strip() for t in topics if isinstance(t, str) and t.strip()))
        if not names:
            raise ConfigurationError("topics", list(topics), "a non-empty list of topic names")
        given = _offsets(offsets)
        outside = sorted(tp for tp in given if tp.topic not in names)
        _refuse_outside(outside, "a topic passed to Subscribe")
        return _strategy("Subscribe", Subscription("subscribe", topics=names), kafkaParams, given)

    @staticmethod
    def SubscribePattern(
        pattern: str | re.Pattern[str],
        kafkaParams: Mapping[str, Any],
        offsets: Mapping[Any, int] | None = None,
    ) -> ConsumerStrategy:
        """Every topic whose whole name matches ``pattern`` (a Python regular expression), as
        Spark Streaming's ``SubscribePattern`` does: it hands the pattern to the Java consumer's
        ``subscribe(Pattern)``, which keeps a topic when ``matcher(name).matches()``. (The
        structured source's ``subscribePattern`` keeps a topic whose name merely contains a
        match, as Spark's does: :data:`~kafka_direct.planning.reader.STRUCTURED`.) A compiled
        pattern keeps its IGNORECASE, MULTILINE, DOTALL and VERBOSE flags; Kafka's internal
        topics are never matched."""
        text = _pattern_text(pattern)
        if not isinstance(text, str) or not text:
            # An empty regex matches every topic; never read the whole cluster by accident.
            raise ConfigurationError("pattern", text, "a non-empty regular expression")
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigurationError(
                "pattern", text, f"a valid regular expression ({exc})"
            ) from None
        given = _offsets(offsets)
        matched = matching_topics(text, {tp.topic for tp in given}, DSTREAM.pattern)
        outside = sorted(tp for tp in given if tp.topic not in matched)
        _refuse_outside(outside, "a topic matching the pattern")
        subscription = Subscription("subscribePattern", pattern=text)
        return _strategy("SubscribePattern", subscription, kafkaParams, given)

    @staticmethod
    def Assign(
        topicPartitions: Iterable[Any],
        kafkaParams: Mapping[str, Any],
        offsets: Mapping[Any, int] | None = None,
    ) -> ConsumerStrategy:
        """A fixed list of partitions: ``TopicPartition``s or ``(topic, partition)`` pairs."""
        tps = tuple(sorted({_topic_partition(tp, "topicPartitions") for tp in topicPartitions}))
        if not tps:
            raise ConfigurationError("topicPartitions", [], "a non-empty list of partitions")
        given = _offsets(offsets)
        outside = sorted(set(given) - set(tps))
        _refuse_outside(outside, "an assigned partition")
        return _strategy("Assign", Subscription("assign", partitions=tps), kafkaParams, given)


def _strategy(
    name: Literal["Subscribe", "SubscribePattern", "Assign"],
    subscription: Subscription,
    params: Mapping[str, Any],
    offsets: PartitionOffsets,
) -> ConsumerStrategy:
    kafka, group, reset = validate_params(params)
    return ConsumerStrategy(name, subscription, kafka, group, reset, offsets)


#: The flags of a compiled pattern that travel as inline flags (Java's regex has the same
#: letters); re.UNICODE is the default of every str pattern.
_INLINE_FLAGS = {re.IGNORECASE: "i", re.MULTILINE: "m", re.DOTALL: "s", re.VERBOSE: "x"}


def _pattern_text(pattern: object) -> object:
    """A pattern's text; a compiled pattern's flags become inline flags in front, so that
    ``re.compile("events-.*", re.I)`` matches as it would in Python. Only the text travels
    (the subscription is text, as a Java ``Pattern`` would be), and dropping a flag would
    silently change which topics are read."""
    if not isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern.pattern, str):
        raise ConfigurationError("pattern", pattern.pattern, "a str regular expression, not bytes")
    flags = pattern.flags & ~re.UNICODE
    other = flags & ~sum(_INLINE_FLAGS)
    if other:
        raise ConfigurationError(
            "pattern",
            pattern.pattern,
            "a pattern compiled with no flags but re.IGNORECASE, re.MULTILINE, re.DOTALL or "
            f"re.VERBOSE (got {re.RegexFlag(other)!r})",
            "Pass the pattern as text, with inline flags such as '(?i)' where it needs them.",
        )
    letters = "".join(letter for flag, letter in _INLINE_FLAGS.items() if flags & flag)
    return f"(?{letters}){pattern.pattern}" if letters else pattern.pattern


def _topic_partition(value: object, option: str) -> TopicPartition:
    if isinstance(value, tuple) and len(value) == 2:
        topic, partition = value
        if (
            isinstance(topic, str)
            and topic
            and isinstance(partition, int)
            and not isinstance(partition, bool)
            and partition >= 0
        ):
            return TopicPartition(topic, partition)
    raise ConfigurationError(option, value, "TopicPartition(topic, partition) with partition >= 0")


def _offsets(offsets: Mapping[Any, int] | None) -> PartitionOffsets:
    result: PartitionOffsets = {}
    for key, off in dict(offsets or {}).items():
        tp = _topic_partition(key, "offsets")
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise ConfigurationError(
                "offsets", {str(tp): off}, "an offset >= 0 (the next offset to read) per partition"
            )
        result[tp] = off
    return result


def _refuse_outside(outside: list[TopicPartition], expected: str) -> None:
    if outside:
        raise ConfigurationError(
            "offsets",
            ", ".join(map(str, outside)),
            f"only partitions of {expected}",
            "Remove them from offsets, or add their topics to the strategy.",
        )
