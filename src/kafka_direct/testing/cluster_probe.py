"""Probes for a starting Kafka broker: an accepting socket, a metadata answer.

Plain library: runs in the process that owns a :class:`~kafka_direct.testing.KafkaCluster`.
"""

from __future__ import annotations

import socket
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

__all__ = [
    "broker_answers",
    "group_coordinator_ready",
    "metadata_broker_ids",
    "port_accepts",
]

# Quiet, quick probes: no librdkafka connect errors on stderr while the JVM starts, and no
# reconnect backoff growing to seconds.
_PROBE_CONFIG = {"log_level": 0, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}


def port_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def metadata_broker_ids(bootstrap: str, timeout_s: float = 2.0) -> set[int]:
    """The broker ids a metadata request answers with; empty when nothing answers."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **_PROBE_CONFIG})
    try:
        return set(admin.list_topics(timeout=timeout_s).brokers)
    except KafkaException:
        return set()


def broker_answers(address: str, node_id: int, timeout_s: float = 2.0) -> bool:
    """The broker at ``address`` answers metadata and lists itself (it has registered)."""
    return node_id in metadata_broker_ids(address, timeout_s)


def group_coordinator_ready(bootstrap: str, timeout_s: float) -> str | None:
    """Ask a group coordinator for committed offsets, through a consumer, which waits out
    ``COORDINATOR_LOAD_IN_PROGRESS``; this creates and loads ``__consumer_offsets``.

    None once it answers, else the last error seen within ``timeout_s``. An error is asked
    again until the deadline, not reported at once: while a new cluster settles under load the
    coordinator can be unknown or moving for a moment, and one such answer failed a test run.

    On a fresh cluster the first ``AdminClient.list_consumer_group_offsets`` otherwise meets a
    coordinator still loading, and librdkafka 2.16 has crashed the process (SIGSEGV) there.
    """
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kafka-direct-warm-up", **_PROBE_CONFIG}
    )
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                consumer.committed(
                    [TopicPartition("kafka-direct-warm-up", 0)], timeout=max(remaining, 0.1)
                )
                return None
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                said = error.str() if isinstance(error, KafkaError) else str(exc)
                if time.monotonic() + 0.2 >= deadline:
                    return said
            time.sleep(0.2)
    finally:
        consumer.close()
