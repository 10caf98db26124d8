"""The sink's options, parsed and validated once. Pure: plain library.

Runs wherever a writer is built: the Spark driver's Python processes (``df.write`` and every
micro-batch of ``writeStream``, where PySpark builds the writer twice), and, pickled with the
writer, executors. It imports neither Spark nor the Kafka client.

Option names follow Spark's Kafka sink (``topic``, ``kafka.*``), so switching from
``format("kafka")`` is a change of format name. Names are case-insensitive (PySpark lower-cases
them). ``kafka.*`` options go to the producer without the prefix, except the keys the sink owns,
which are refused with the reason (:data:`SINK_OWNED_KAFKA_KEYS`). Options are read by
:mod:`~kafka_direct.config.reader`, as the source's are; the producers' librdkafka config is
built by :func:`kafka_direct.config.clients.producer_config`, beside the consumers'.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kafka_direct.config.clients import (
    ALIASES,
    DEFAULT_DELIVERY_TIMEOUT_MS,
    idempotence_conflict,
    int_setting,
    kbytes,
    producer_config,
)
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.oauth import provider_spec
from kafka_direct.config.reader import OptionReader, kafka_params
from kafka_direct.errors import ConfigurationError

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "SINK_OPTION_DEFAULTS",
    "SINK_OWNED_KAFKA_KEYS",
    "SinkOptions",
    "parse_sink_options",
]

log = logging.getLogger(__name__)

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
    # exactly-once, df.write: the write's id, kept across re-runs so that a re-run of a failed
    # write skips the tasks that committed (by default every df.write gets a new one).
    "transactionalWriteId": "",
    # exactly-once: the topic whose partition 0 carries the tasks' markers (committed offsets of
    # one consumer group per transactional id); the 'topic' option by default.
    "transactionMarkerTopic": "",
    # exactly-once: what a replayed task that finds its micro-batch committed must match, to
    # be skipped: 'rows' (its count and its rows' digest) or 'count' (for queries whose rows
    # are not the same on a replay: rand() or uuid() in a written column).
    "transactionReplayCheck": "rows",
    # A Python function ('module:function') that gives OAUTHBEARER tokens (config.oauth).
    "oauthProvider": "",
}

#: What a transactionalWriteId may hold (it goes into the markers' JSON).
_WRITE_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,200}$")

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
    #: ``transactionalWriteId`` as given ("" = a new id per batch write; refused for a stream).
    transactional_write_id: str = ""
    #: ``transactionMarkerTopic``, else the ``topic`` option (exactly-once only).
    marker_topic: str | None = None
    #: ``transactionReplayCheck`` is ``rows``: a skipped replay's rows must match the digest.
    replay_check_rows: bool = True

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]


def parse_sink_options(raw: Mapping[str, str], *, read_stores: bool = True) -> SinkOptions:
    """Validate every sink option; raise :class:`ConfigurationError` on the first problem.
    ``read_stores=False``: key and trust stores are not read (no client is built)."""
    opts = OptionReader(raw, SINK_OPTION_DEFAULTS, "sink")
    opts.refuse_near_misses()
    exactly_once = (
        opts.choice(
            "deliveryGuarantee",
            (AT_LEAST_ONCE, EXACTLY_ONCE),
            f"'{AT_LEAST_ONCE}' (the default) or '{EXACTLY_ONCE}'",
        )
        == EXACTLY_ONCE
    )
    kafka = kafka_params(
        opts.kafka_options(),
        owned=SINK_OWNED_KAFKA_KEYS,
        owner="sink",
        oauth_provider=opts.get("oauthProvider") or None,
        read_stores=read_stores,
    )
    if exactly_once:
        _check_exactly_once(kafka)
    _check_acks(kafka)
    topic = opts.raw.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigurationError(
            "topic",
            topic,
            "a topic name",
            "Remove the option to take each row's topic from a 'topic' column.",
        )
    prefix = opts.text("transactionalIdPrefix")
    if prefix and not exactly_once:
        raise ConfigurationError(
            "transactionalIdPrefix",
            prefix,
            "no prefix with deliveryGuarantee 'at-least-once'",
            "Transactional ids are only used with .option('deliveryGuarantee', 'exactly-once'): "
            "set that too, or remove the prefix.",
        )
    write_id = opts.text("transactionalWriteId")
    if write_id and not exactly_once:
        raise ConfigurationError(
            "transactionalWriteId",
            write_id,
            "no write id with deliveryGuarantee 'at-least-once'",
            "A write id names an exactly-once batch write, so that a re-run skips the tasks that "
            "committed: set .option('deliveryGuarantee', 'exactly-once') too, or remove it.",
        )
    if write_id and not _WRITE_ID_PATTERN.match(write_id):
        raise ConfigurationError(
            "transactionalWriteId",
            write_id,
            "1 to 200 of the characters A-Z a-z 0-9 . _ -",
            "It goes into every task's marker; name the data the write copies, e.g. "
            "'orders-2026-11-30'.",
        )
    replay_check = opts.choice(
        "transactionReplayCheck", ("rows", "count"), "'rows' (the default) or 'count'"
    )
    if replay_check != "rows" and not exactly_once:
        raise ConfigurationError(
            "transactionReplayCheck",
            replay_check,
            "no replay check with deliveryGuarantee 'at-least-once'",
            "It says how an exactly-once task checks a replay of a committed micro-batch: set "
            ".option('deliveryGuarantee', 'exactly-once') too, or remove the option.",
        )
    producer = producer_config(kafka, exactly_once=exactly_once)
    conflict = None if exactly_once else idempotence_conflict(kafka)
    if conflict is not None and "enable.idempotence" not in kafka:
        log.warning(
            "The sink's producers are not idempotent, because kafka.%s (as Java's producer "
            "decides): librdkafka's retries may then duplicate or reorder records within a "
            "partition.",
            conflict,
        )
    _check_queue_holds_a_record(kafka, producer)
    marker_topic = opts.text("transactionMarkerTopic") or (topic.strip() if topic else None)
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
        _fit_delivery_timeout(kafka, producer)
        _check_transaction_timeout(kafka, producer)
    return SinkOptions(
        kafka=kafka,
        producer=KafkaConfig(producer),
        topic=topic.strip() if topic is not None else None,
        delivery_timeout_ms=_delivery_timeout_ms(kafka, producer),
        cache_timeout_ms=opts.integer("producerCache.timeoutMs", minimum=1),
        cache_capacity=opts.integer("producerCache.capacity", minimum=1),
        # The C producer has no token callback: a token function writes through the Python one.
        fast_path=opts.boolean("fastPath.enabled") and provider_spec(kafka) is None,
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
        transactional_write_id=write_id,
        marker_topic=marker_topic if exactly_once else None,
        replay_check_rows=replay_check == "rows",
    )


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
    for name in ALIASES["acks"]:
        value = params.get(name)
        if value is not None and value.strip().lower() not in ("all", "-1"):
            raise ConfigurationError(
                f"kafka.{name}",
                value,
                "'all' (the default) with deliveryGuarantee 'exactly-once'",
                "A transaction commits only records every in-sync replica has; remove the option.",
            )


def _fit_delivery_timeout(user: Mapping[str, str], config: dict[str, str]) -> None:
    """exactly-once: the sink's default delivery timeout (Java's 2 minutes) gives way to a
    shorter transaction timeout, as librdkafka's own default does (it lowers an unset
    ``message.timeout.ms`` to ``transaction.timeout.ms``). Set as a default, it would count as
    the user's choice to librdkafka, which refuses one beyond the transaction timeout, so
    Java's default ``kafka.transaction.timeout.ms=60000`` would be refused."""
    if any(name in user for name in ALIASES["delivery.timeout.ms"]):
        return
    timeout = int_setting(config.get("transaction.timeout.ms"), None)
    if timeout is not None and timeout >= 1:
        config["delivery.timeout.ms"] = str(min(DEFAULT_DELIVERY_TIMEOUT_MS, timeout))


def _check_transaction_timeout(user: Mapping[str, str], config: Mapping[str, str]) -> None:
    """librdkafka refuses a delivery timeout that the user set beyond the transaction's: say
    so before a task (the default gives way: :func:`_fit_delivery_timeout`)."""
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
        name = next((n for n in ALIASES["delivery.timeout.ms"] if n in user), None)
        raise ConfigurationError(
            f"kafka.{name or 'transaction.timeout.ms'}",
            str(delivery) if name else raw,
            f"kafka.delivery.timeout.ms ({delivery}) <= kafka.transaction.timeout.ms ({timeout})",
            "A record may not wait for the broker longer than its transaction may stay open "
            "(librdkafka refuses it): lower the delivery timeout (or remove it: it then "
            "defaults to the smaller of 120000 and the transaction timeout) or raise the "
            "transaction timeout (at most the brokers' transaction.max.timeout.ms).",
        )


def _check_acks(params: Mapping[str, str]) -> None:
    for name in ALIASES["acks"]:
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
        # Idempotence set by the user conflicts; the default gives way (producer_config).
        idempotence = params.get("enable.idempotence", "").strip().lower()
        if value.strip().lower() not in ("all", "-1") and idempotence == "true":
            raise ConfigurationError(
                f"kafka.{name}",
                value,
                "'all' with kafka.enable.idempotence=true",
                "Idempotence needs acks=all: set 'kafka.enable.idempotence' to 'false' or "
                "remove it (librdkafka's retries may then duplicate or reorder records), or "
                "remove this option.",
            )


def _check_queue_holds_a_record(user: Mapping[str, str], config: Mapping[str, str]) -> None:
    """librdkafka answers "queue full" for a record larger than the whole queue, however empty
    it is, so such a record would wait for room forever; Java's producer fails it at once.
    producer_config sizes the queue to hold the largest record; a user's own choice of both
    that conflicts is refused here, before a task waits."""
    largest = int_setting(config.get("message.max.bytes"), None)
    queue_kb = int_setting(config.get("queue.buffering.max.kbytes"), None)
    if largest is not None and queue_kb is not None and queue_kb * 1024 < largest:
        raise ConfigurationError(
            "kafka.queue.buffering.max.kbytes",
            str(queue_kb),
            f"room for the largest record kafka.message.max.bytes lets through ({largest} "
            f"bytes): at least {kbytes(largest)}",
            "A record larger than the producer's whole queue could never be sent: raise the "
            "queue bound (kafka.buffer.memory in the Java client's terms), or lower "
            "kafka.message.max.bytes (kafka.max.request.size).",
        )


def _delivery_timeout_ms(user: Mapping[str, str], config: Mapping[str, str]) -> int:
    name = next((n for n in ALIASES["delivery.timeout.ms"] if n in user), "delivery.timeout.ms")
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
