"""The librdkafka configs each process uses, built in one place. Pure: plain library.

Every override carries its reason next to it, as Spark's
``KafkaSourceProvider.kafkaParamsForExecutors`` does: the driver's admin client
(:func:`admin_config`), the executors' consumers (:func:`executor_consumer_config`, with the
group id of :func:`executor_group_id`), and what a read task needs (:class:`ExecutorSettings`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from kafka_direct.config.kafka import KafkaConfig

__all__ = [
    "ExecutorSettings",
    "admin_config",
    "executor_consumer_config",
    "executor_group_id",
]


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
        # micro-batches; a small queue costs no throughput (docs/performance.md).
        "queued.max.messages.kbytes": "16384",
        "queued.min.messages": "100000",
        # Kafka's and librdkafka's default, kept on purpose. A range ends at or before offsets
        # the driver saw, so a fetch with data to return never waits this long; but a broker
        # that must first read the data from slow storage (tiered storage, Tansu on S3) answers
        # empty when the wait runs out, and with 100 ms a consumer fetched again and again and
        # never got a record from Tansu on S3 (the soak's regression test, docs/performance.md).
        # The cost: a range ending in a transaction marker learns that it is done up to 500 ms
        # later (from an empty fetch at the log end).
        "fetch.wait.max.ms": "500",
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


@dataclass(frozen=True)
class ExecutorSettings:
    """What a task needs to read a range: small, frozen and picklable. Derived once on the
    driver (:meth:`kafka_direct.config.source.SourceOptions.executor_settings`)."""

    consumer_config: KafkaConfig
    poll_timeout_ms: int
    fail_on_data_loss: bool
    batch_size: int
    include_headers: bool
    cache_enabled: bool
    cache_capacity: int
    cache_timeout_s: float
    fast_path: bool = True
