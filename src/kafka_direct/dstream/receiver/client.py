"""The receiver's side of confluent-kafka, and the entry point of its Spark task. Runs in a Spark
executor (the receiver's Python worker).

Everything that touches the Kafka client is here, so the loop in
:mod:`~kafka_direct.dstream.receiver.loop` runs against a fake consumer in unit tests:

- :func:`new_consumer`: the group member, with the library's log and error hooks, librdkafka's
  refusal of a setting turned into a :class:`~kafka_direct.errors.ConfigurationError`;
- :func:`commit`: a synchronous commit of a logged block's offsets, translated;
- :func:`committed`: the group's offsets, asked when a partition the receiver owes a commit
  for comes back to it;
- :func:`consumer_error`: which error events end the receiver (a fatal client error, a denied
  ACL, no committed offset under ``auto.offset.reset=none``) and which only warn;
- :func:`receiver_task`: what ``foreachPartition`` runs, from start to leaving the group, through
  :func:`run_receiver_task`, which the share receiver's task runs too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.config.receiver import ReceiverStreamConfig
from kafka_direct.consumer.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS
from kafka_direct.dstream.receiver.base import BaseReceiver
from kafka_direct.dstream.receiver.control import ReceiverSignals, ReceiverStatus, write_status
from kafka_direct.dstream.receiver.loop import Receiver, ReceiverSpec
from kafka_direct.dstream.receiver.wal import BlockWriter
from kafka_direct.errors import ConfigurationError, KafkaClientError, KafkaDirectError
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import config_error, kafka_errors, translate
from kafka_direct.logs import ensure_worker_logging

__all__ = [
    "commit",
    "committed",
    "consumer_error",
    "new_consumer",
    "receiver_task",
    "run_receiver_task",
]

log = logging.getLogger(__name__)

#: Error events after which receiving cannot go on: access is denied, or the client is dead.
_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
}


#: How long a receiver waits for its group's offsets when a partition it owes a commit returns.
_COMMITTED_TIMEOUT_S = 10.0


def new_consumer(config: ReceiverStreamConfig, receiver: int) -> Any:
    settings = config.consumer_config(receiver)
    events = ClientEvents(f"Receiver {receiver} of group '{config.group}'")
    try:
        return Consumer({**settings, **client_hooks(events, settings)})
    except KafkaException as exc:
        refused = config_error(exc, config.kafka, prefix="")
        if refused is not None:
            raise refused from None
        raise translate(exc, f"Creating receiver {receiver}'s Kafka consumer") from exc


def commit(consumer: Any, offsets: Mapping[tuple[str, int], int], receiver: int) -> bool:
    """Commit a logged block's offsets; False (logged) if the group refused them."""
    tps = [CkTopicPartition(t, p, int(o)) for (t, p), o in sorted(offsets.items())]
    shown = ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items()))
    try:
        with kafka_errors(f"Receiver {receiver} committing {shown}"):
            answer = consumer.commit(offsets=tps, asynchronous=False)
        failed = [tp for tp in answer or [] if tp.error is not None]
        if failed:
            raise KafkaClientError(
                f"Receiver {receiver} committing {shown}: "
                + "; ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed)
            )
    except KafkaClientError as exc:
        log.warning(
            "%s. The block is in the log already: the offsets are owed, sent with the next "
            "commit (a member that reads these partitions before that reads the records again: "
            "a repeat, not a loss).",
            exc,
        )
        return False
    return True


def committed(
    consumer: Any, partitions: list[tuple[str, int]], receiver: int
) -> dict[tuple[str, int], int | None] | None:
    """The group's committed offsets (None where there is none); None (logged) if unknown."""
    try:
        with kafka_errors(f"Receiver {receiver} asking the group's offsets"):
            answer = consumer.committed(
                [CkTopicPartition(t, p) for t, p in partitions], timeout=_COMMITTED_TIMEOUT_S
            )
    except KafkaClientError as exc:
        log.warning("%s. A partition whose last commit failed may repeat records.", exc)
        return None
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in answer}


def consumer_error(error: KafkaError, config: ReceiverStreamConfig) -> KafkaDirectError | None:
    """The error that ends the receiver for this event, or None to log it and go on."""
    code = error.code()
    if code == KafkaError._AUTO_OFFSET_RESET:
        return ConfigurationError(
            "auto.offset.reset",
            config.auto_offset_reset,
            "'earliest' or 'latest' for partitions the group has no offset for",
            f"Group '{config.group}' has no committed offset for a partition it was assigned "
            f"({error.str()}); with 'none' the receiver cannot choose where to start. Set "
            "'auto.offset.reset' in kafkaParams, or commit offsets for the group first.",
        )
    if error.fatal() or code in _DENIED:
        access = Access(config.kafka, topics=config.topics, group=config.group)
        return translate(
            KafkaException(error), f"Receiving for group '{config.group}'", access=access
        )
    return None


def receiver_task(spec: ReceiverSpec, _rows: Iterable[Any]) -> None:
    """The receiver's Spark task (``foreachPartition``): runs until the stream stops."""

    def build(consumer: Any, writer: BlockWriter, signals: ReceiverSignals) -> Receiver:
        return Receiver(
            spec,
            consumer,
            writer,
            signals,
            committer=lambda offsets: commit(consumer, offsets, spec.receiver),
            committed=lambda partitions: committed(consumer, partitions, spec.receiver),
            classify_error=lambda error: consumer_error(error, spec.config),
        )

    run_receiver_task(
        spec,
        lambda: new_consumer(spec.config, spec.receiver),
        build,
        durable=spec.config.write_ahead_log,
    )


def run_receiver_task(
    spec: ReceiverSpec,
    open_consumer: Callable[[], Any],
    build: Callable[[Any, BlockWriter, ReceiverSignals], BaseReceiver],
    *,
    durable: bool,
) -> None:
    """A receiver task from start to end, whichever its loop: open the consumer (a failure is
    reported in the receiver's status, fatal or not), run the loop until the stream stops, then
    leave the group at once, so that what it held moves now, not after a session timeout."""
    ensure_worker_logging()
    try:
        consumer = open_consumer()
    except KafkaDirectError as exc:
        failed = ReceiverStatus(spec.receiver, spec.run, state="failed", attempt=spec.attempt)
        failed.error = f"{type(exc).__name__}: {exc}"
        failed.fatal = isinstance(exc, ConfigurationError) or not getattr(exc, "retriable", True)
        write_status(spec.root, failed)
        raise exc.with_traceback(None) from None
    schema = ARROW_SCHEMA_WITH_HEADERS if spec.config.include_headers else ARROW_SCHEMA
    writer = BlockWriter(spec.root, spec.run, durable=durable, schema=schema)
    signals = ReceiverSignals(spec.root, spec.run, orphan_timeout_s=spec.orphan_timeout_s)
    receiver = build(consumer, writer, signals)
    try:
        receiver.run()
    except KafkaDirectError as exc:
        raise exc.with_traceback(None) from None
    finally:
        receiver.abandon()
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("%s %d: closing its consumer failed: %s", receiver.KIND, spec.receiver, exc)
        receiver.closed()
