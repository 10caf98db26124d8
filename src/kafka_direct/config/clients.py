"""The librdkafka configs each process uses, built in one place. Pure: plain library.

Runs wherever a client's config is made: the Spark driver's Python processes, and executors
(configs travel pickled inside settings built on the driver).

Every override carries its reason next to it, as Spark's
``KafkaSourceProvider.kafkaParamsForExecutors`` does:
- the driver's admin client (:func:`admin_config`; for the sink :func:`connection_config`);
- the executors' consumers (:func:`executor_consumer_config`, with the group id of
  :func:`executor_group_id`; :func:`probe_consumer_config` to have librdkafka check one on the
  driver), and what a read task needs (:class:`ExecutorSettings`);
- the sink's producers (:func:`producer_config`) and its marker reader
  (:func:`marker_consumer_config`);
- the receiver stream's consumers (:func:`receiver_consumer_config`).

Defaults go in only where the user chose nothing, under either of librdkafka's names for a
property (:data:`ALIASES`, :func:`with_defaults`). The non-string settings (callbacks) are added
where a client is created.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from kafka_direct.config.kafka import KafkaConfig

#: The source option 'maxBatchBytes' by default: the most bytes of records (keys, values, and
#: headers when they are read) in one Arrow batch of a read task. It also sizes the executors'
#: prefetch (:func:`prefetch_tunables`).
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024

#: librdkafka's own default 'fetch.max.bytes': the prefetch never asks for more per request.
_FETCH_MAX_BYTES_CAP = 52_428_800

#: The per-partition fetch size the executors use when the budget allows: fewer round trips
#: while draining a backlog.
_PARTITION_FETCH_BYTES = 4 * 1024 * 1024

#: The executors' ``queued.min.messages``: how many records librdkafka keeps fetching ahead of
#: a partition's reader (why so few: :func:`executor_consumer_config`).
IDLE_QUEUE_RECORDS = 16

#: Every client's ``reconnect.backoff.ms`` where the user chose none (librdkafka's default is
#: 100). A new client learns the cluster's brokers from its bootstrap connection, then drops
#: that connection and connects to a broker by its id; librdkafka spaces such connections by
#: half this backoff (at least 11 ms), so with 100 every new client's first request waited
#: 50 ms: the driver's check and plan of every query, a stream's first offsets, a new consumer's
#: first fetch, a new producer's first batch. After a failed connection the backoff still
#: doubles up to ``reconnect.backoff.max.ms`` (10 s), so an outage is not hammered.
#: docs/performance.md, "A new client's first request".
RECONNECT_BACKOFF_MS = 20
_CONNECT = {"reconnect.backoff.ms": str(RECONNECT_BACKOFF_MS)}

__all__ = [
    "ALIASES",
    "DEFAULT_DELIVERY_TIMEOUT_MS",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "IDLE_QUEUE_RECORDS",
    "RECONNECT_BACKOFF_MS",
    "ExecutorSettings",
    "admin_config",
    "connection_config",
    "executor_consumer_config",
    "executor_group_id",
    "int_setting",
    "kbytes",
    "marker_consumer_config",
    "probe_consumer_config",
    "producer_config",
    "receiver_consumer_config",
    "with_defaults",
]

#: librdkafka aliases: either name sets the same property, and the later one wins, so a default
#: must not be added when the user set the other name.
ALIASES: dict[str, tuple[str, ...]] = {
    "acks": ("acks", "request.required.acks"),
    "linger.ms": ("linger.ms", "queue.buffering.max.ms"),
    "delivery.timeout.ms": ("delivery.timeout.ms", "message.timeout.ms"),
    "partitioner": ("partitioner", "partitioner_cb"),
    "max.partition.fetch.bytes": ("max.partition.fetch.bytes", "fetch.message.max.bytes"),
    "retries": ("retries", "message.send.max.retries"),
    "max.in.flight": ("max.in.flight", "max.in.flight.requests.per.connection"),
}

#: Java's max.request.size default, which bounds one record (librdkafka's message.max.bytes
#: default is 1,000,000: records Spark's sink writes between the two would be refused).
DEFAULT_MESSAGE_MAX_BYTES = 1_048_576
#: The sink's bound on a producer's queue (librdkafka's default is 1 GB).
DEFAULT_QUEUE_KBYTES = 65_536


def with_defaults(user: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """``user`` plus each of ``defaults`` that the user set under none of its names."""
    config = dict(user)
    for key, value in defaults.items():
        if not any(name in config for name in ALIASES.get(key, (key,))):
            config[key] = value
    return config


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


def prefetch_tunables(user: Mapping[str, str], max_batch_bytes: int) -> dict[str, str]:
    """librdkafka's prefetch limits sized from a read's byte budget (``maxBatchBytes``), as the
    Java consumer bounds the JVM connector with ``fetch.max.bytes`` and
    ``max.partition.fetch.bytes``: whatever the number of partitions a consumer is assigned (a
    packed task's one consumer too), its queue holds about one batch's worth of records, and
    one fetch brings at most that much. A record larger than these limits is still fetched
    (Kafka returns the first record of a partition whatever its size). Only where the user
    has not set them."""
    chosen = user.get("max.partition.fetch.bytes") or user.get("fetch.message.max.bytes")
    try:
        partition_fetch = int(chosen) if chosen else 0
    except ValueError:  # librdkafka refuses it, with its own words, when the config is checked
        partition_fetch = 0
    partition_fetch = partition_fetch or min(_PARTITION_FETCH_BYTES, max_batch_bytes)
    return {
        # Bigger fetches mean fewer round trips while draining a backlog.
        "max.partition.fetch.bytes": str(partition_fetch),
        # One fetch request (all partitions on a broker) brings at most a budget's worth.
        "fetch.max.bytes": str(max(partition_fetch, min(max_batch_bytes, _FETCH_MAX_BYTES_CAP))),
        # Prefetch depth, kept to a budget's worth: a pooled consumer keeps its queue between
        # micro-batches; a small queue costs no throughput (docs/performance.md).
        "queued.max.messages.kbytes": str(max(max_batch_bytes // 1024, 1)),
    }


def executor_consumer_config(
    user: Mapping[str, str],
    *,
    group_id: str,
    isolation_level: str,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> dict[str, str]:
    """librdkafka consumer config for reading offset ranges on executors."""
    # Tunables, only where the user has not chosen: librdkafka's defaults favour a steady
    # trickle of messages over draining a known backlog fast.
    tunables = {
        # Default 1000 ms: once the local queue fills, the fetcher sleeps that long, which
        # stalls a reader that drains the queue quickly.
        "fetch.queue.backoff.ms": "10",
        **prefetch_tunables(user, max_batch_bytes),
        # librdkafka fetches until a partition's queue holds this many records (default
        # 100,000). A pooled consumer idles between micro-batches with its partitions still
        # assigned; with that default it fetched every record as it arrived (one fetch per
        # producer request per idle consumer), which cost the broker CPU the stream's own
        # micro-batches needed (docs/performance.md, "Idle pooled consumers"). With a few
        # records it stops after a fetch or two: one fetch response of small records is more
        # than that, so a backlog still streams, and large records still queue up to the
        # byte bound above (16 records of 1 MB is the default budget).
        "queued.min.messages": str(IDLE_QUEUE_RECORDS),
        # Kafka's and librdkafka's default, kept on purpose. A range ends at or before offsets
        # the driver saw, so a fetch with data to return never waits this long; but a broker
        # that must first read the data from slow storage (tiered storage, Tansu on S3) answers
        # empty when the wait runs out, and with 100 ms a consumer fetched again and again and
        # never got a record from Tansu on S3 (the soak's regression test, docs/performance.md).
        # The cost: a range ending in a transaction marker learns that it is done up to 500 ms
        # later (from an empty fetch at the log end).
        "fetch.wait.max.ms": "500",
        "client.id": "kafka-direct-executor",
        **_CONNECT,
    }
    config = with_defaults(user, tunables)
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


def probe_consumer_config(kafka: Mapping[str, str]) -> dict[str, str]:
    """A consumer config like the executors' for ``kafka``, to let librdkafka check it."""
    return executor_consumer_config(
        kafka,
        group_id="kafka-direct-config-check",
        isolation_level=kafka.get("isolation.level", "read_uncommitted"),
    )


def receiver_consumer_config(
    kafka: Mapping[str, str], *, group: str, auto_offset_reset: str, receiver_id: int
) -> dict[str, str]:
    """librdkafka consumer config of one receiver of ``createStream``: a member of the user's
    group. ``auto_offset_reset`` in librdkafka's spelling (earliest, latest or error)."""
    tunables = {
        # The prefetch queue is most of a receiver's memory: bounded, so that memory stays flat
        # however far the stream falls behind (librdkafka's default allows 64 MB).
        "queued.max.messages.kbytes": "16384",
        # Default 1000 ms: a receiver that drains its queue quickly must not stall for that long.
        "fetch.queue.backoff.ms": "10",
        "client.id": f"kafka-direct-receiver-{receiver_id}",
        **_CONNECT,
    }
    settings = with_defaults(kafka, tunables)
    settings.update(
        {
            # The user's group: Kafka assigns the receivers partitions and keeps their offsets.
            "group.id": group,
            # A block's offsets are committed by the receiver, after the block is logged.
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": auto_offset_reset,
            # As Spark's Java consumer (librdkafka defaults to read_committed).
            "isolation.level": kafka.get("isolation.level", "read_uncommitted"),
        }
    )
    return settings


#: Java's delivery.timeout.ms default (2 minutes); librdkafka's message.timeout.ms is 5 minutes.
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000

#: exactly-once: how long a task's transaction may stay open. A task's transaction lasts as long
#: as the task writes, so one minute (librdkafka's and Java's default) would fail a large first
#: micro-batch forever; the longer it is, the longer read_committed readers wait behind a crashed
#: writer that nothing restarts. Within the brokers' default transaction.max.timeout.ms (15 min).
DEFAULT_TRANSACTION_TIMEOUT_MS = 300_000


def producer_config(user: Mapping[str, str], *, exactly_once: bool = False) -> dict[str, str]:
    """The sink's producers' librdkafka config: the user's ``kafka.*`` settings, plus these
    defaults where the user chose nothing. The transactional id is added per task."""
    defaults = {
        # The Java producer's default since Kafka 3.0 (librdkafka's is false): librdkafka's own
        # retries then never duplicate or reorder records within a partition.
        "enable.idempotence": "true",
        # Java's default: a record counts as written once every in-sync replica has it.
        # Idempotence requires it, and it is what the task waits for before it succeeds.
        "acks": "all",
        # Keyed records land where Java's default partitioner puts them (murmur2); librdkafka's
        # default (consistent_random, CRC32) would put them elsewhere. Keyless records go to a
        # sticky random partition (sticky.partitioning.linger.ms), as Java's do.
        "partitioner": "murmur2_random",
        # Batches fill while the task hands records over (librdkafka's default is 5 ms). It
        # costs no latency at the end of a task: flush() sends at once, whatever linger.ms says.
        # Fuller batches matter across a real network, hence 50 (docs/performance.md).
        "linger.ms": "50",
        # Java's delivery.timeout.ms: a record not acknowledged within 2 minutes fails the task
        # (librdkafka waits 5 minutes by default).
        "delivery.timeout.ms": str(DEFAULT_DELIVERY_TIMEOUT_MS),
        # A bounded queue keeps a worker's memory flat: a full queue makes the task wait for
        # the broker. librdkafka's default byte bound is 1 GB; 64 MB still holds 100,000
        # records (its default count bound) of up to 640 bytes.
        "queue.buffering.max.kbytes": str(DEFAULT_QUEUE_KBYTES),
        # Java's max.request.size (see the constant).
        "message.max.bytes": str(DEFAULT_MESSAGE_MAX_BYTES),
        "queue.buffering.max.messages": "100000",
        "client.id": "kafka-direct-producer",
        # A new producer's first batch waits for no 50 ms pause (the constant).
        **_CONNECT,
    }
    if exactly_once:
        # A task's transaction lasts as long as the task writes (see the constant).
        defaults = {"transaction.timeout.ms": str(DEFAULT_TRANSACTION_TIMEOUT_MS), **defaults}
    else:
        conflict = idempotence_conflict(user)
        if conflict is not None:
            # The Java producer's rule (Kafka 3.0 and later): idempotence is only a default, so
            # a setting it cannot work with turns it off instead of failing the job (the sink
            # says so in its log: config.sink).
            defaults["enable.idempotence"] = "false"
    config = with_defaults(user, defaults)
    # A record larger than the whole queue would wait for room forever: librdkafka answers
    # "queue full" even when it is empty. Java fails such a record at once; here the queue
    # holds the largest record message.max.bytes lets through (a conflicting choice of the
    # user's own is refused by the sink's options check).
    if "queue.buffering.max.kbytes" not in user:
        largest = int_setting(config.get("message.max.bytes"), DEFAULT_MESSAGE_MAX_BYTES)
        config["queue.buffering.max.kbytes"] = str(max(DEFAULT_QUEUE_KBYTES, kbytes(largest)))
    elif "message.max.bytes" not in user:
        # A queue the user chose smaller than a default record: records fail at once above
        # it, as Java's fail above buffer.memory, instead of the job being refused.
        queue_bytes = int_setting(user["queue.buffering.max.kbytes"], DEFAULT_QUEUE_KBYTES) * 1024
        if queue_bytes < DEFAULT_MESSAGE_MAX_BYTES:
            config["message.max.bytes"] = str(max(queue_bytes, 1000))
    return config


def idempotence_conflict(user: Mapping[str, str]) -> str | None:
    """The user's setting that idempotence cannot work with, as Java's producer judges it
    (``acks`` other than all, no retries, more than 5 requests in flight), said as
    "<name> is <value>"; or None."""
    for name in ALIASES["acks"]:
        value = user.get(name)
        if value is not None and value.strip().lower() not in ("all", "-1"):
            return f"{name} is {value.strip()}, not 'all'"
    for name in ALIASES["retries"]:
        if int_setting(user.get(name), 1) == 0:
            return f"{name} is 0"
    for name in ALIASES["max.in.flight"]:
        if int_setting(user.get(name), 5) > 5:
            return f"{name} is {user[name].strip()}, more than 5"
    return None


@overload
def int_setting(raw: str | None, default: int) -> int: ...
@overload
def int_setting(raw: str | None, default: None) -> int | None: ...
def int_setting(raw: str | None, default: int | None) -> int | None:
    """A number setting's value, or ``default`` when it is unset or no number (librdkafka
    refuses that one, in its own words, when the client is made)."""
    try:
        return int(raw.strip()) if raw is not None else default
    except ValueError:
        return default


def kbytes(count: int) -> int:
    """``count`` bytes in KB, rounded up: never a smaller bound than asked."""
    return -(-count // 1024)


#: Settings only a producer reads. The sink's admin client (the check that the cluster answers)
#: and marker reader get the user's settings without them, or librdkafka warns that it ignores
#: each one.
_PRODUCER_ONLY = {
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "linger.ms",
    "queue.buffering.max.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "batch.num.messages",
    "batch.size",
    "delivery.timeout.ms",
    "message.timeout.ms",
    "request.timeout.ms",
    "compression.type",
    "compression.codec",
    "compression.level",
    "partitioner",
    "retries",
    "message.send.max.retries",
    "sticky.partitioning.linger.ms",
    "queuing.strategy",
    "transaction.timeout.ms",
}


def connection_config(user: Mapping[str, str]) -> dict[str, str]:
    """The sink's user settings without the producer-only ones: for its admin client and its
    marker reader."""
    return with_defaults({k: v for k, v in user.items() if k not in _PRODUCER_ONLY}, _CONNECT)


def marker_consumer_config(connection: Mapping[str, str], transactional_id: str) -> dict[str, str]:
    """The exactly-once sink's marker reader on an executor: reads the offset a task's
    transaction committed for the consumer group named after its transactional id."""
    return {
        **connection,
        "group.id": transactional_id,
        # require_stable: only what committed counts.
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
        "client.id": "kafka-direct-sink-marker",
    }


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
    return with_defaults(config, _CONNECT)


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
    #: 'maxBatchBytes': the most bytes of records in one Arrow batch.
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
