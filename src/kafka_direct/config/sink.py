"""The sink's options and its producers' librdkafka config, parsed and validated once. Pure: plain
library.

Runs wherever a writer is built: the Spark driver's Python processes (``df.write`` and every
micro-batch of ``writeStream``, where PySpark builds the writer twice), and, pickled with the
writer, executors. It imports neither Spark nor the Kafka client.

Option names follow Spark's Kafka sink (``topic``, ``kafka.*``), so switching from
``format("kafka")`` is a change of format name. Names are case-insensitive (PySpark lower-cases
them). ``kafka.*`` options go to the producer without the prefix, except the keys the sink owns,
which are refused with the reason (:data:`SINK_OWNED_KAFKA_KEYS`). :func:`producer_config` adds
the sink's own settings, each with its reason, as :mod:`~kafka_direct.config.clients` does for
the consumers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafka_direct.config.kafka import (
    REDACTED,
    KafkaConfig,
    is_secret,
    refuse_jvm_settings,
    refuse_near_misses,
)
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError

__all__ = [
    "AT_LEAST_ONCE",
    "DEFAULT_DELIVERY_TIMEOUT_MS",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "EXACTLY_ONCE",
    "SINK_OPTION_DEFAULTS",
    "SINK_OWNED_KAFKA_KEYS",
    "SinkOptions",
    "connection_config",
    "parse_sink_options",
    "producer_config",
]

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"

#: Every sink option (besides ``kafka.*``) with its default ("" = none).
SINK_OPTION_DEFAULTS: dict[str, str] = {
    # The topic of every record; wins over a 'topic' column (as in Spark).
    "topic": "",
    # How long an idle pooled producer stays open (Spark's spark.kafka.producer.cache.timeout).
    "producerCache.timeoutMs": "600000",
    # Idle producers kept per Python worker, across configurations.
    "producerCache.capacity": "8",
    # Produce through the C fast path when it is installed (else the Python path).
    "fastPath.enabled": "true",
    # 'at-least-once' (Spark's guarantee) or 'exactly-once' (Kafka transactions, one per task).
    "deliveryGuarantee": AT_LEAST_ONCE,
    # exactly-once: the transactional ids' prefix; a stream derives it from its checkpoint.
    "transactionalIdPrefix": "",
    # exactly-once: the topic whose partition 0 carries the tasks' markers (committed offsets of
    # one consumer group per transactional id); the 'topic' option by default.
    "transactionMarkerTopic": "",
}

_DELIVERY_REPORTS = (
    "The sink owns delivery reports: it needs every failed one to fail the task (at-least-once). "
    "Remove the option."
)

#: kafka.* keys the sink manages itself → why, and what to do instead.
SINK_OWNED_KAFKA_KEYS: dict[str, str] = {
    # Spark's wording: "Kafka option 'key.serializer' is not supported as keys are serialized
    # with ByteArraySerializer."
    "key.serializer": (
        "Keys are written as they are: give the 'key' column the type string or binary, "
        "e.g. col('id').cast('string') or to_json(...)."
    ),
    "value.serializer": (
        "Values are written as they are: give the 'value' column the type string or binary, "
        "e.g. to_json(struct(...)) or col('payload').cast('binary')."
    ),
    "transactional.id": (
        "Each write task needs a transactional id of its own, the same for every attempt of the "
        "task: the sink makes them. For transactions set .option('deliveryGuarantee', "
        "'exactly-once') (and optionally 'transactionalIdPrefix'); remove the option."
    ),
    "delivery.report.only.error": _DELIVERY_REPORTS,
    "on_delivery": _DELIVERY_REPORTS,
    "dr_cb": _DELIVERY_REPORTS,
    "dr_msg_cb": _DELIVERY_REPORTS,
    "error_cb": (
        "The sink reports client errors through Python logging (and in the task's error); "
        "remove the option."
    ),
    "logger": (
        "librdkafka's log goes to the Python logger 'kafka_direct.librdkafka'; remove the option."
    ),
    "interceptor.classes": "Java interceptors do not exist in librdkafka; remove the option.",
}

#: Java's delivery.timeout.ms default (2 minutes); librdkafka's message.timeout.ms is 5 minutes.
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000

#: exactly-once: how long a task's transaction may stay open. A task's transaction lasts as long
#: as the task writes, so one minute (librdkafka's and Java's default) would fail a large first
#: micro-batch forever; the longer it is, the longer read_committed readers wait behind a crashed
#: writer that nothing restarts. Within the brokers' default transaction.max.timeout.ms (15 min).
DEFAULT_TRANSACTION_TIMEOUT_MS = 300_000

# librdkafka aliases: either name sets the same property, and the later one wins, so a default
# must not be added when the user set the other name.
_ALIASES: dict[str, tuple[str, ...]] = {
    "acks": ("acks", "request.required.acks"),
    "linger.ms": ("linger.ms", "queue.buffering.max.ms"),
    "delivery.timeout.ms": ("delivery.timeout.ms", "message.timeout.ms"),
    "partitioner": ("partitioner", "partitioner_cb"),
}


def producer_config(user: Mapping[str, str], *, exactly_once: bool = False) -> dict[str, str]:
    """The producers' librdkafka config: the user's ``kafka.*`` settings, plus these defaults
    where the user chose nothing (the non-string settings, such as the delivery callback, are
    added where the producer is created). The transactional id is added per task."""
    config = dict(user)
    if exactly_once and "transaction.timeout.ms" not in config:
        config["transaction.timeout.ms"] = str(DEFAULT_TRANSACTION_TIMEOUT_MS)
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
        "queue.buffering.max.kbytes": "65536",
        "queue.buffering.max.messages": "100000",
        "client.id": "kafka-direct-producer",
    }
    for key, value in defaults.items():
        if not any(name in config for name in _ALIASES.get(key, (key,))):
            config[key] = value
    return config


#: Settings only a producer reads. The driver's admin client (the check that the cluster answers)
#: gets the user's settings without them, or librdkafka warns that it ignores each one.
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
    """The user's settings without the producer-only ones: for the driver's admin client."""
    return {k: v for k, v in user.items() if k not in _PRODUCER_ONLY}


@dataclass(frozen=True)
class SinkOptions:
    """Every sink option, validated. Built by :func:`parse_sink_options`."""

    #: What the user set under ``kafka.`` (without the prefix): for messages and checks.
    kafka: KafkaConfig
    #: The producers' librdkafka config (:func:`producer_config`).
    producer: KafkaConfig
    #: The ``topic`` option, or None when each row's 'topic' column names it.
    topic: str | None
    delivery_timeout_ms: int
    cache_timeout_ms: int
    cache_capacity: int
    fast_path: bool
    #: ``deliveryGuarantee`` is ``exactly-once``.
    exactly_once: bool = False
    #: ``transactionalIdPrefix`` as given ("" = derive it, or refuse: see the sink).
    transactional_id_prefix: str = ""
    #: ``transactionMarkerTopic``, else the ``topic`` option (exactly-once only).
    marker_topic: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Validate every sink option; raise :class:`ConfigurationError` on the first problem."""
    opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
    refuse_near_misses(opts, SINK_OPTION_DEFAULTS, "sink")
    exactly_once = _guarantee(opts) == EXACTLY_ONCE
    kafka = _kafka_params(opts, exactly_once=exactly_once)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigurationError(
            "topic",
            topic,
            "a topic name",
            "Remove the option to take each row's topic from a 'topic' column.",
        )
    prefix = _get(opts, "transactionalIdPrefix")
    if prefix and not exactly_once:
        raise ConfigurationError(
            "transactionalIdPrefix",
            prefix,
            "no prefix with deliveryGuarantee 'at-least-once'",
            "Transactional ids are only used with .option('deliveryGuarantee', 'exactly-once'): "
            "set that too, or remove the prefix.",
        )
    producer = producer_config(kafka, exactly_once=exactly_once)
    marker_topic = _get(opts, "transactionMarkerTopic") or (topic.strip() if topic else None)
    if exactly_once and marker_topic is None:
        raise ConfigurationError(
            "transactionMarkerTopic",
            None,
            "an existing topic with deliveryGuarantee 'exactly-once' when rows carry their topic",
            "Each task commits a marker (an offset of its own consumer group) on partition 0 of "
            "this topic with its records, and reads it back on a retry; no record is written "
            "there. Set .option('topic', ...) or .option('transactionMarkerTopic', ...).",
        )
    if exactly_once:
        _check_transaction_timeout(kafka, producer)
    return SinkOptions(
        kafka=kafka,
        producer=KafkaConfig(producer),
        topic=topic.strip() if topic is not None else None,
        delivery_timeout_ms=_delivery_timeout_ms(kafka, producer),
        cache_timeout_ms=_integer(opts, "producerCache.timeoutMs", minimum=1),
        cache_capacity=_integer(opts, "producerCache.capacity", minimum=1),
        fast_path=_boolean(opts, "fastPath.enabled"),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        marker_topic=marker_topic if exactly_once else None,
    )


def _guarantee(opts: Mapping[str, str]) -> str:
    raw = _get(opts, "deliveryGuarantee")
    if raw.lower() not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ConfigurationError(
            "deliveryGuarantee", raw, f"'{AT_LEAST_ONCE}' (the default) or '{EXACTLY_ONCE}'"
        )
    return raw.lower()


def _check_exactly_once(params: Mapping[str, str]) -> None:
    """Producer settings that transactions cannot work with, refused before anything starts."""
    idempotence = params.get("enable.idempotence")
    if idempotence is not None and idempotence.strip().lower() != "true":
        raise ConfigurationError(
            "kafka.enable.idempotence",
            idempotence,
            "'true' (the default) with deliveryGuarantee 'exactly-once'",
            "Kafka transactions are built on the idempotent producer; remove the option.",
        )
    for name in _ALIASES["acks"]:
        value = params.get(name)
        if value is not None and value.strip().lower() not in ("all", "-1"):
            raise ConfigurationError(
                f"kafka.{name}",
                value,
                "'all' (the default) with deliveryGuarantee 'exactly-once'",
                "A transaction commits only records every in-sync replica has; remove the option.",
            )


def _check_transaction_timeout(user: Mapping[str, str], config: Mapping[str, str]) -> None:
    """librdkafka refuses a delivery timeout beyond the transaction's: say so before a task."""
    raw = config["transaction.timeout.ms"]
    try:
        timeout = int(raw)
    except ValueError:
        timeout = -1
    if timeout < 1000:
        raise ConfigurationError(
            "kafka.transaction.timeout.ms",
            raw,
            "a number of milliseconds >= 1000",
            "It bounds how long a task's transaction may stay open.",
        )
    delivery = _delivery_timeout_ms(user, config)
    if delivery > timeout:
        name = next((n for n in _ALIASES["delivery.timeout.ms"] if n in user), None)
        raise ConfigurationError(
            f"kafka.{name or 'transaction.timeout.ms'}",
            str(delivery) if name else raw,
            f"kafka.delivery.timeout.ms ({delivery}) <= kafka.transaction.timeout.ms ({timeout})",
            "A record may not wait for the broker longer than its transaction may stay open "
            "(librdkafka refuses it): lower the delivery timeout or raise the transaction "
            "timeout (at most the brokers' transaction.max.timeout.ms).",
        )


def _get(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name.lower())
    return value.strip() if value is not None else SINK_OPTION_DEFAULTS[name]


def _integer(opts: Mapping[str, str], name: str, *, minimum: int) -> int:
    raw = _get(opts, name)
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigurationError(name, raw, f"an integer >= {minimum}")
    return value


def _boolean(opts: Mapping[str, str], name: str) -> bool:
    raw = _get(opts, name)
    if raw.lower() not in ("true", "false"):
        raise ConfigurationError(name, raw, "'true' or 'false'")
    return raw.lower() == "true"


def _kafka_params(opts: Mapping[str, str], *, exactly_once: bool = False) -> KafkaConfig:
    params: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        shown = REDACTED if is_secret(name) else value
        if name in SINK_OWNED_KAFKA_KEYS:
            raise _sink_owned(key, shown, SINK_OWNED_KAFKA_KEYS[name])
        params[name] = value  # untouched: a secret may start or end with a space
    refuse_jvm_settings(params)
    if not params.get("bootstrap.servers", "").strip():
        raise ConfigurationError(
            "kafka.bootstrap.servers",
            params.get("bootstrap.servers"),
            "a comma-separated list of host:port",
            "Set .option('kafka.bootstrap.servers', 'host1:9092,host2:9092').",
        )
    if exactly_once:
        _check_exactly_once(params)
    _check_acks(params)
    return KafkaConfig(params)


def _sink_owned(option: str, shown: str, reason: str) -> UnsupportedKafkaOptionError:
    return UnsupportedKafkaOptionError(option, shown, reason, owner="sink")


def _check_acks(params: Mapping[str, str]) -> None:
    for name in _ALIASES["acks"]:
        value = params.get(name)
        if value is None:
            continue
        if value.strip() == "0":
            raise ConfigurationError(
                f"kafka.{name}",
                value,
                "'all' (the default), '-1' or '1'",
                "With acks=0 the broker never acknowledges a record, so the sink cannot know "
                "that it was written; it promises at-least-once delivery.",
            )
        idempotence = params.get("enable.idempotence", "true").strip().lower()
        if value.strip().lower() not in ("all", "-1") and idempotence == "true":
            raise ConfigurationError(
                f"kafka.{name}",
                value,
                "'all' while idempotence is on (the default)",
                "Idempotence needs acks=all: also set 'kafka.enable.idempotence' to 'false' "
                "(librdkafka's retries may then duplicate or reorder records), or remove the "
                "option.",
            )


def _delivery_timeout_ms(user: Mapping[str, str], config: Mapping[str, str]) -> int:
    name = next((n for n in _ALIASES["delivery.timeout.ms"] if n in user), "delivery.timeout.ms")
    raw = config[name]
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1:
        raise ConfigurationError(
            f"kafka.{name}",
            raw,
            "a number of milliseconds >= 1",
            "It bounds how long a task waits for the broker to acknowledge a record; librdkafka "
            "reads 0 as 'wait forever', which could hang a write.",
        )
    return value
