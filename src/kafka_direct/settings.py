"""Defaults, owned Kafka keys, and the librdkafka configs each process uses. Pure: plain library.

The client configs are built here, in one place, so every override carries its reason next to it
(as Spark's ``KafkaSourceProvider.kafkaParamsForExecutors`` does).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

__all__ = [
    "OPTION_DEFAULTS",
    "SOURCE_OWNED_KAFKA_KEYS",
    "admin_config",
    "executor_consumer_config",
    "executor_group_id",
    "parse_duration_ms",
]

#: Every source option with its default ("" = no default). Names as documented; lookup is
#: case-insensitive. Kept in the README's options table order.
OPTION_DEFAULTS: dict[str, str] = {
    "subscribe": "",
    "subscribePattern": "",
    "assign": "",
    "startingOffsets": "",
    "startingTimestamp": "",
    "startingOffsetsByTimestamp": "",
    "startingOffsetsByTimestampStrategy": "error",
    "endingOffsets": "",
    "endingTimestamp": "",
    "endingOffsetsByTimestamp": "",
    "failOnDataLoss": "true",
    "includeHeaders": "false",
    "kafkaConsumer.pollTimeoutMs": "120000",
    "fetchOffset.numRetries": "3",
    "fetchOffset.retryIntervalMs": "10",
    "maxOffsetsPerTrigger": "",
    "minOffsetsPerTrigger": "",
    "maxTriggerDelay": "15m",
    "maxOffsetsPerPartitionPerTrigger": "",
    "minPartitions": "",
    "maxRecordsPerPartition": "",
    "groupIdPrefix": "spark-kafka-source",
    "commitOffsetsToGroup": "",
    "commitOffsets": "true",
    "committedOffsetsFallback": "error",
    "consumerCache.enabled": "true",
    "consumerCache.capacity": "64",
    "consumerCache.timeoutMs": "300000",
    "arrowBatchSize": "20000",
    "fastPath.enabled": "true",
    # librdkafka defaults to read_committed; Spark (the Java client) to read_uncommitted. We
    # follow Spark so a query switched from format("kafka") sees the same records.
    "kafka.isolation.level": "read_uncommitted",
}

#: kafka.* keys the source manages itself → what to do instead (Spark's wording where it has one).
SOURCE_OWNED_KAFKA_KEYS: dict[str, str] = {
    "auto.offset.reset": (
        "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' to specify "
        "where to start (and 'failOnDataLoss' for offsets that are out of range)."
    ),
    "enable.auto.commit": (
        "Offsets are tracked in Spark's checkpoint, never auto-committed; remove the option."
    ),
    "key.deserializer": (
        "Keys are always returned as binary; deserialize them with DataFrame operations, "
        "e.g. col('key').cast('string')."
    ),
    "value.deserializer": (
        "Values are always returned as binary; deserialize them with DataFrame operations, "
        "e.g. col('value').cast('string') or from_json."
    ),
    "key.serializer": "The source reads only; serializers do not apply. Remove the option.",
    "value.serializer": "The source reads only; serializers do not apply. Remove the option.",
    "enable.partition.eof": "The source sets it on executors to detect the log end; remove it.",
    "interceptor.classes": "Java interceptors do not exist in librdkafka; remove the option.",
}

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.I)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """Spark's ``timeStringAsMs``: '15m', '30s', '500ms', '1h', '2d'; a bare number is ms."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def executor_group_id(user_group_id: str | None, prefix: str, bootstrap: str, strategy: str) -> str:
    """The group id executors use: never the user's own group, so they cannot disturb it.

    Deterministic for a given query definition, because readers are rebuilt in several
    processes and the consumer pool is keyed by group: a random id would defeat the pool.
    Executors only ``assign`` and never commit, so sharing the id between queries is harmless.
    """
    if user_group_id:
        return f"{user_group_id}-executor"
    digest = hashlib.sha256(f"{bootstrap}|{strategy}".encode()).hexdigest()[:16]
    return f"{prefix}-{digest}-executor"


def executor_consumer_config(
    user: Mapping[str, str], *, group_id: str, isolation_level: str
) -> dict[str, str]:
    """librdkafka consumer config for reading offset ranges on executors."""
    config = dict(user)
    # Tunables, only where the user has not chosen: librdkafka's defaults favour a steady
    # trickle of messages over draining a known backlog fast.
    tunables = {
        # Default 1000 ms: once the local queue fills, the fetcher sleeps that long, which
        # stalls a reader that drains the queue quickly.
        "fetch.queue.backoff.ms": "10",
        # Bigger fetches mean fewer round trips while draining a backlog.
        "max.partition.fetch.bytes": "4194304",
        # Prefetch depth per partition, kept small: a pooled consumer keeps its queue between
        # micro-batches (measured: same throughput, 1-23 MB worker growth instead of 32-105 MB).
        "queued.max.messages.kbytes": "16384",
        "queued.min.messages": "100000",
        # A range always ends at or before offsets the driver saw, so a fetch rarely waits.
        "fetch.wait.max.ms": "100",
        "client.id": "kafka-direct-executor",
    }
    # librdkafka aliases: setting either name sets the same property, and the later one wins,
    # so a tunable must not be added when the user set its other name.
    aliases = {"max.partition.fetch.bytes": "fetch.message.max.bytes"}
    for key, value in tunables.items():
        if key not in config and aliases.get(key) not in config:
            config[key] = value
    config.update(
        {
            # Never the user's group: executors read assigned ranges and must not move offsets.
            "group.id": group_id,
            # Spark's checkpoint (or the user's store) owns offsets; commits would lie.
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            # Out-of-range must surface as an error so failOnDataLoss can decide, never a jump.
            "auto.offset.reset": "error",
            # Reaching the log end is how a range that ends on a transaction marker finishes.
            "enable.partition.eof": "true",
            # Must equal the driver's list_offsets isolation, or planned offsets are unreachable.
            "isolation.level": isolation_level,
        }
    )
    return config


def admin_config(user: Mapping[str, str]) -> dict[str, str]:
    """librdkafka AdminClient config for the driver: the user's connection settings only."""
    consumer_only = {
        "group.id",
        "isolation.level",
        "group.instance.id",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "fetch.max.bytes",
        "fetch.min.bytes",
        "fetch.wait.max.ms",
        "fetch.queue.backoff.ms",
        "max.partition.fetch.bytes",
        "fetch.message.max.bytes",
        "queued.max.messages.kbytes",
        "queued.min.messages",
        "check.crcs",
        "client.rack",
    }
    config = {k: v for k, v in user.items() if k not in consumer_only}
    config.setdefault("client.id", "kafka-direct-driver")
    return config
