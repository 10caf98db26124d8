"""``LocationStrategies`` and ``ConsumerStrategies`` of the DStream-style direct stream, and where
a stream starts. Pure: plain library (no Spark, no Kafka client), used by the Spark driver; the
cluster is reached only through the injected :class:`~kafka_direct.positions.OffsetReader`.

The API mirrors Spark's ``spark-streaming-kafka-0-10`` (seeds 000/001)::

    ConsumerStrategies.Subscribe(["events"], {"bootstrap.servers": B, "group.id": "g"})
    ConsumerStrategies.SubscribePattern("events-.*", params, {TopicPartition("events-a", 0): 42})
    ConsumerStrategies.Assign([TopicPartition("events", 0)], params)

``params`` are librdkafka keys, as the Scala API takes Java client keys; most are the same names.
A stream starts each partition at (first match wins), as Scala's ``ConsumerStrategy.onStart``
does: the offset given to the strategy, else the offset stored for the group, else
``auto.offset.reset``. Partitions that appear while the stream runs (a new topic matching the
pattern, new partitions) start at their earliest offset when nothing is given or stored, as in the
structured source, so records written before their discovery are not skipped.

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

from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.options import KafkaConfig, Strategy, redact
from kafka_direct.planning import apply_data_loss_policy, detect_data_loss
from kafka_direct.positions import OffsetReader, check_within_log_end
from kafka_direct.settings import SOURCE_OWNED_KAFKA_KEYS

__all__ = [
    "AutoOffsetReset",
    "ConsumerStrategies",
    "ConsumerStrategy",
    "LocationStrategies",
    "LocationStrategy",
    "resolve_new_partition_offsets",
    "resolve_start_offsets",
    "validate_params",
    "warn_if_ignored",
]

log = logging.getLogger(__name__)

AutoOffsetReset = Literal["earliest", "latest", "none"]

#: librdkafka's spellings and the Java client's, mapped to the Java meaning.
_RESET_VALUES: dict[str, AutoOffsetReset] = {
    "earliest": "earliest",
    "smallest": "earliest",
    "beginning": "earliest",
    "latest": "latest",
    "largest": "latest",
    "end": "latest",
    "none": "none",
    "error": "none",
}

#: Keys the stream handles itself (the rest of SOURCE_OWNED_KAFKA_KEYS is refused as in the source).
_STREAM_KEYS = {"auto.offset.reset", "enable.auto.commit", "group.id"}


# --- location strategies --------------------------------------------------------------------------


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


# --- consumer strategies --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerStrategy:
    """Which partitions a stream reads, with what client settings, starting where.

    ``kafka`` holds the connection settings handed to the driver's admin client and to executors
    (``group.id``, ``auto.offset.reset`` and ``enable.auto.commit`` are taken out: the stream
    handles them). ``offsets`` are the explicit starting offsets given to the strategy.
    """

    name: Literal["Subscribe", "SubscribePattern", "Assign"]
    subscription: Strategy
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
        return _strategy("Subscribe", Strategy("subscribe", topics=names), kafkaParams, given)

    @staticmethod
    def SubscribePattern(
        pattern: str | re.Pattern[str],
        kafkaParams: Mapping[str, Any],
        offsets: Mapping[Any, int] | None = None,
    ) -> ConsumerStrategy:
        """Every topic whose whole name matches ``pattern`` (a Python regular expression)."""
        text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
        if not isinstance(text, str) or not text:
            # An empty regex matches every topic; never read the whole cluster by accident.
            raise ConfigurationError("pattern", text, "a non-empty regular expression")
        try:
            compiled = re.compile(text)
        except re.error as exc:
            raise ConfigurationError(
                "pattern", text, f"a valid regular expression ({exc})"
            ) from None
        given = _offsets(offsets)
        outside = sorted(tp for tp in given if not compiled.fullmatch(tp.topic))
        _refuse_outside(outside, "a topic matching the pattern")
        subscription = Strategy("subscribePattern", pattern=text)
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
        return _strategy("Assign", Strategy("assign", partitions=tps), kafkaParams, given)


def _strategy(
    name: Literal["Subscribe", "SubscribePattern", "Assign"],
    subscription: Strategy,
    params: Mapping[str, Any],
    offsets: PartitionOffsets,
) -> ConsumerStrategy:
    kafka, group, reset = validate_params(params)
    return ConsumerStrategy(name, subscription, kafka, group, reset, offsets)


def validate_params(
    params: Mapping[str, Any], *, require_group: bool = True
) -> tuple[KafkaConfig, str, AutoOffsetReset]:
    """Check ``kafkaParams``; return the client settings, the group id and the reset policy.

    ``require_group=False`` is for one-off reads (``createRDD``), which commit nothing.
    """
    if not isinstance(params, Mapping):
        raise ConfigurationError("kafkaParams", type(params).__name__, "a dict of librdkafka keys")
    config = {str(k): _param_text(v) for k, v in params.items() if v is not None}
    if not config.get("bootstrap.servers", "").strip():
        raise ConfigurationError(
            "bootstrap.servers",
            config.get("bootstrap.servers"),
            "a comma-separated list of host:port",
            "Add 'bootstrap.servers': 'host1:9092,host2:9092' to kafkaParams.",
        )
    group = config.get("group.id", "").strip()
    if not group and require_group:
        raise ConfigurationError(
            "group.id",
            config.get("group.id"),
            "a consumer group id",
            "The stream commits the offsets you pass to commitAsync for this group (or to your "
            "offsetStore under it); add 'group.id': 'my-app' to kafkaParams.",
        )
    if config.get("enable.auto.commit", "false").strip().lower() != "false":
        raise ConfigurationError(
            "enable.auto.commit",
            config["enable.auto.commit"],
            "'false' or no value",
            "Auto-commit would commit offsets before your function has processed them, which "
            "loses data after a failure. The stream commits only what you pass to "
            "stream.commitAsync(offsetRanges), after your function returns. Remove the key.",
        )
    raw_reset = config.get("auto.offset.reset", "latest").strip().lower()
    if raw_reset not in _RESET_VALUES:
        raise ConfigurationError(
            "auto.offset.reset", config["auto.offset.reset"], "'earliest', 'latest' or 'none'"
        )
    for key, value in config.items():
        if key in SOURCE_OWNED_KAFKA_KEYS and key not in _STREAM_KEYS:
            shown = redact({key: value})[key]
            raise UnsupportedKafkaOptionError(key, shown, SOURCE_OWNED_KAFKA_KEYS[key])
    level = config.get("isolation.level")
    if level is not None and level not in ("read_committed", "read_uncommitted"):
        raise ConfigurationError("isolation.level", level, "'read_committed' or 'read_uncommitted'")
    kafka = KafkaConfig({k: v for k, v in config.items() if k not in _STREAM_KEYS})
    return kafka, group, _RESET_VALUES[raw_reset]


def _param_text(value: object) -> str:
    # Scala's kafkaParams are Map[String, Object]: accept ints and booleans the same way.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


# --- starting offsets -----------------------------------------------------------------------------


def resolve_start_offsets(
    strategy: ConsumerStrategy,
    tps: Iterable[TopicPartition],
    stored: Mapping[TopicPartition, int],
    reader: OffsetReader,
    *,
    fail_on_data_loss: bool,
) -> PartitionOffsets:
    """Where a new stream starts: given offsets > ``stored`` (the group's) > auto.offset.reset.

    A given or stored offset outside the log is checked, not silently reset as the Java consumer
    would under ``auto.offset.reset``: below the earliest offset is data loss
    (``failOnDataLoss``), beyond the latest a configuration error (wrong topic, or a recreated one).
    """
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    start: PartitionOffsets = {}
    for tp in wanted:
        if tp in strategy.offsets:
            start[tp] = strategy.offsets[tp]
        elif tp in stored:
            start[tp] = stored[tp]
    rest = [tp for tp in wanted if tp not in start]
    if rest and strategy.auto_offset_reset == "none":
        raise ConfigurationError(
            "auto.offset.reset",
            "none",
            f"a stored or given offset for every partition; none for {', '.join(map(str, rest))}",
            f"Commit offsets for group '{strategy.group_id}', pass offsets to the strategy, or "
            "set 'auto.offset.reset' to 'earliest' or 'latest'.",
        )
    earliest = reader.earliest(wanted)
    latest = reader.latest(wanted)
    known = dict(start)
    for tp in rest:
        start[tp] = earliest[tp] if strategy.auto_offset_reset == "earliest" else latest[tp]
    check_within_log_end(
        "offsets",
        known,
        latest,
        lambda tp: (
            "The offset does not exist yet: check the topic was not recreated, or reset "
            f"the group's offsets for {tp}."
        ),
        where=lambda tp: (
            "given to the strategy" if tp in strategy.offsets else "stored for the group"
        ),
    )
    losses = detect_data_loss(known, earliest, latest)
    if losses:
        start.update(
            apply_data_loss_policy(
                losses, known, earliest, fail_on_data_loss=fail_on_data_loss, logger=log
            )
        )
    log.info(
        "%s starts at %s", strategy.describe(), {str(tp): off for tp, off in sorted(start.items())}
    )
    return start


def resolve_new_partition_offsets(
    strategy: ConsumerStrategy,
    new: Iterable[TopicPartition],
    stored: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool,
) -> PartitionOffsets:
    """Partitions discovered while the stream runs: given > stored > earliest.

    Earliest rather than ``auto.offset.reset``: a partition discovered late was created (or
    matched) after the stream started, so everything in it is new to the stream (the structured
    source's rule). A given or stored offset outside the log (aged out, or of a recreated topic) is
    data loss, handled by ``failOnDataLoss``.
    """
    resolved: PartitionOffsets = {}
    for tp in sorted(set(new)):
        if tp not in earliest or tp not in latest:
            log.warning("Cannot find the offsets of new partition %s; it vanished again", tp)
        elif tp in strategy.offsets:
            resolved[tp] = strategy.offsets[tp]
        elif tp in stored:
            resolved[tp] = stored[tp]
        else:
            resolved[tp] = earliest[tp]
    losses = detect_data_loss(resolved, earliest, latest)
    if losses:
        resolved = apply_data_loss_policy(
            losses, resolved, earliest, fail_on_data_loss=fail_on_data_loss, logger=log
        )
    if resolved:
        log.info("Partitions added: %s", {str(tp): off for tp, off in resolved.items()})
    return resolved
