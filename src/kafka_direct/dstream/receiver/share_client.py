"""The share receiver's side of confluent-kafka (``ShareConsumer``, a preview API in 2.16), the
entry point of its Spark task, and the driver's check of the cluster before it starts. The task
runs in a Spark executor (the receiver's Python worker); :func:`check_share_cluster` runs in the
Spark driver.

Everything that touches the share consumer is here, so that the loop in
:mod:`~kafka_direct.dstream.receiver.share_loop` runs against a fake in unit tests.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from kafka_direct.config.receiver import ReceiverStreamConfig
from kafka_direct.dstream.receiver.client import consumer_error, run_receiver_task
from kafka_direct.dstream.receiver.control import ReceiverSignals
from kafka_direct.dstream.receiver.loop import ReceiverSpec
from kafka_direct.dstream.receiver.share_loop import AckTypes, ShareReceiver
from kafka_direct.dstream.receiver.supervisor import check_topics
from kafka_direct.dstream.receiver.wal import BlockWriter
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import config_error, translate

__all__ = ["check_share_cluster", "new_share_consumer", "share_receiver_task"]

log = logging.getLogger(__name__)

ACKS = AckTypes(AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)


def new_share_consumer(config: ReceiverStreamConfig, receiver: int) -> Any:
    settings = config.consumer_config(receiver)
    events = ClientEvents(f"Share receiver {receiver} of group '{config.group}'")
    try:
        return ShareConsumer({**settings, **client_hooks(events, settings)})
    except KafkaException as exc:
        refused = config_error(exc, config.kafka, prefix="")
        if refused is not None:
            raise refused from None
        raise translate(exc, f"Creating share receiver {receiver}'s Kafka consumer") from exc


def check_share_cluster(config: ReceiverStreamConfig) -> None:
    """A setting the share consumer refuses, or a missing topic, fails at start."""
    consumer = new_share_consumer(config, 0)
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()  # never subscribed: it joined nothing
    check_topics(config)


def share_receiver_task(spec: ReceiverSpec, _rows: Iterable[Any]) -> None:
    """The share receiver's Spark task (``foreachPartition``): runs until the stream stops.
    Closing its consumer sends what is acknowledged and leaves the group; records polled and
    not logged (only after a failure) go back to the group when their lock expires."""

    def build(consumer: Any, writer: BlockWriter, signals: ReceiverSignals) -> ShareReceiver:
        return ShareReceiver(
            spec,
            consumer,
            writer,
            signals,
            acks=ACKS,
            classify_error=lambda error: consumer_error(error, spec.config),
        )

    # Always durable: a record is acknowledged only once its block is in the log.
    run_receiver_task(
        spec, lambda: new_share_consumer(spec.config, spec.receiver), build, durable=True
    )
