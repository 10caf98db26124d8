"""The one factory of admin clients, and the config check every client gets at creation. Runs in
the Spark driver (planner and stream runner) and the user's process (DStream API, CLI).

Every admin client comes from :func:`new_admin_client`, so each one logs through
:mod:`kafka_direct.kafka.logs` (never straight to stderr) and refuses an invalid setting by
naming its ``kafka.``-prefixed option. :func:`check_consumer_config` lets librdkafka check the
executors' consumer config on the driver, before a query starts; :func:`check_producer_config`
does the same for the sink's producers, before a write starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kafka_direct.config.clients import admin_config
from kafka_direct.errors import ConfigurationError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import config_error, translate

__all__ = ["check_consumer_config", "check_producer_config", "new_admin_client"]

#: librdkafka's name of a producer property → the (Java) alias users write, for messages.
_PRODUCER_ALIASES = {
    "queue.buffering.max.ms": "linger.ms",
    "request.required.acks": "acks",
    "message.timeout.ms": "delivery.timeout.ms",
    "compression.codec": "compression.type",
    "message.send.max.retries": "retries",
    "max.in.flight.requests.per.connection": "max.in.flight",
    "metadata.broker.list": "bootstrap.servers",
    "sasl.mechanisms": "sasl.mechanism",
}


def new_admin_client(kafka: Mapping[str, str], events: ClientEvents | None = None) -> Any:
    """An AdminClient from the user's connection settings (``admin_config``), logging through
    :mod:`kafka_direct.kafka.logs`. An invalid setting raises :class:`ConfigurationError`."""
    full: dict[str, Any] = {**admin_config(kafka), **client_hooks(events, kafka)}
    try:
        return AdminClient(full)
    except KafkaException as exc:
        refused = config_error(exc, kafka)
        if refused is not None:
            raise refused from None
        raise translate(exc, "Creating the Kafka admin client") from exc


def check_consumer_config(config: Mapping[str, str], user: Mapping[str, str]) -> None:
    """Create (and close) a consumer with ``config``: librdkafka checks every setting when a
    client is created, so a typo fails here, before a query starts, instead of looking like an
    unreachable broker at the first read. ``user`` is what the user set (for the message)."""
    full: dict[str, Any] = {**config, **client_hooks(None, config)}
    try:
        consumer = Consumer(full)
    except KafkaException as exc:
        refused = config_error(exc, user)
        if refused is not None:
            raise refused from None
        raise translate(exc, "Creating a Kafka consumer") from exc
    consumer.close()


def check_producer_config(config: Mapping[str, str], user: Mapping[str, str]) -> None:
    """Create (and close) a producer with ``config``, as the sink's write tasks will: librdkafka
    checks every setting and combination (idempotence with ``acks``, say) at creation, so a
    mistake fails before a write starts instead of in every task. ``user`` is what the user
    set (for the message). It sends no record."""
    events = ClientEvents("The Kafka producer (configuration check)")
    full: dict[str, Any] = {
        **config,
        **client_hooks(events, config),
        "delivery.report.only.error": True,
    }
    try:
        producer = Producer(full)
    except KafkaException as exc:
        # librdkafka names a property by its own name: map it back to the one the user wrote.
        aliased = {c: a for c, a in _PRODUCER_ALIASES.items() if a in user and c not in user}
        refused = config_error(exc, {**user, **{c: user[a] for c, a in aliased.items()}})
        if refused is None:
            raise translate(exc, "Creating a Kafka producer") from exc
        name = refused.option.removeprefix("kafka.")
        if name in aliased:
            refused = ConfigurationError(
                f"kafka.{aliased[name]}",
                refused.value,
                refused.expected,
                f"{refused.fix} ('{name}' is librdkafka's name for it.)",
            )
        raise refused from None
    close = getattr(producer, "close", None)  # older confluent-kafka: destroyed when dropped
    if close is not None:
        close()
