"""Reading an exactly-once task's markers back (:mod:`~kafka_direct.producer.markers`). Runs in
Spark executors (Python workers), inside :func:`~kafka_direct.producer.transactional.
write_transaction`, after ``init_transactions`` finished or aborted the id's last transaction.

A marker is a committed offset of the consumer group named like the transactional id, so only
committed markers count: both reads ask for stable offsets (``require_stable``, which the marker
reader's ``read_committed`` turns on), and a coordinator still settling a transaction answers
``UNSTABLE_OFFSET_COMMIT`` until it has, which is waited out as a busy coordinator is.

- :func:`read_marker`: partition 0 of the marker topic, the task's own marker. One request,
  through the consumer the task needs anyway (its group metadata goes into the transaction).
- :func:`markers_elsewhere`: every other topic of the group, only when the marker topic holds
  none (a new query's first micro-batch, a new prefix's first batch write), so that a marker
  left on the topic the query used before is not taken for "nothing committed". An admin
  client of its own: the consumer can only ask for partitions it names.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from kafka_direct.config.clients import marker_consumer_config
from kafka_direct.kafka.admin import new_admin_client
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import translate
from kafka_direct.producer.markers import Marker

__all__ = ["RETRY_PAUSE_S", "markers_elsewhere", "new_marker_reader", "read_marker"]

#: Coordinator errors that pass by themselves (a coordinator moving or loading its state, or
#: settling a transaction's offsets).
_COORDINATOR_BUSY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.UNSTABLE_OFFSET_COMMIT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}

#: The pause between two attempts at reading a marker while the coordinator is busy.
RETRY_PAUSE_S = 0.2


def new_marker_reader(connection: Mapping[str, str], txn_id: str, events: ClientEvents) -> Consumer:
    """The consumer of the group named ``txn_id``: it reads the task's marker and gives the
    transaction its group metadata. It never subscribes, so it joins no group."""
    config: dict[str, Any] = {
        **marker_consumer_config(connection, txn_id),
        **client_hooks(events, connection),
    }
    try:
        return Consumer(config)
    except KafkaException as exc:
        raise translate(exc, "Creating the marker reader on the executor") from exc


def read_marker(consumer: Consumer, topic: str, txn_id: str, timeout_s: float) -> Marker | None:
    """The last marker committed for ``txn_id`` on ``topic``; waits out a busy coordinator."""
    deadline = time.monotonic() + timeout_s
    while True:
        error: KafkaError | None = None
        try:
            (tp,) = consumer.committed([TopicPartition(topic, 0)], max(timeout_s / 4, 1.0))
            error = tp.error
            if error is None:
                return Marker.decode(tp.metadata) if tp.offset >= 0 else None
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError):
                raise translate(exc, f"Reading the marker of '{txn_id}'") from None
        if error.code() not in _COORDINATOR_BUSY or time.monotonic() >= deadline:
            raise translate(
                KafkaException(error),
                f"Reading the marker of transactional id '{txn_id}' (the committed offset of "
                f"its consumer group on '{topic}' partition 0)",
            )
        time.sleep(RETRY_PAUSE_S)


def markers_elsewhere(
    connection: Mapping[str, str], txn_id: str, marker_topic: str, timeout_s: float
) -> dict[str, Marker]:
    """The markers ``txn_id``'s group committed on partition 0 of topics other than
    ``marker_topic``, by topic (offsets that are not markers are left out); waits out a busy
    coordinator."""
    admin = new_admin_client(connection, ClientEvents("The exactly-once sink's marker lookup"))
    context = (
        f"Looking for markers of transactional id '{txn_id}' on topics other than "
        f"'{marker_topic}' (the committed offsets of its consumer group)"
    )
    request = [ConsumerGroupTopicPartitions(txn_id)]
    deadline = time.monotonic() + timeout_s
    wait_s = max(timeout_s / 4, 1.0)
    while True:
        try:
            futures = admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=wait_s
            )
            result = futures[txn_id].result(timeout=wait_s + 5)
            break
        except (KafkaException, FutureTimeout) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            busy = not isinstance(exc, KafkaException) or (
                isinstance(error, KafkaError) and error.code() in _COORDINATOR_BUSY
            )
            if not busy or time.monotonic() >= deadline:
                raise translate(exc, context) from None
            time.sleep(RETRY_PAUSE_S)
    found: dict[str, Marker] = {}
    for tp in result.topic_partitions or []:
        if tp.topic == marker_topic or tp.partition != 0 or tp.error is not None:
            continue
        marker = Marker.decode(tp.metadata) if tp.offset >= 0 else None
        if marker is not None:
            found[tp.topic] = marker
    return found
