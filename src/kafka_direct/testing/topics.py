"""Create and delete topics for tests, benchmarks and the demo CLIs. Plain library: the process
that calls it (a test, a benchmark, the word-count job's driver).

Works against real Kafka and the embedded broker alike. A created topic is returned only once it
can be written: every partition's leader answers a ListOffsets request. Metadata listing the
partitions is not enough. A KRaft broker publishes a new topic to its metadata cache a moment
before its replica manager opens the partitions, and a produce request in that moment fails with
``NOT_LEADER_OR_FOLLOWER``. Brokers without the fix for KAFKA-15591 (Apache Kafka 4.1 among them)
then accept the producer's *next* batch first, as the partition has no producer state yet, and
refuse every retry of the first one with ``OUT_OF_ORDER_SEQUENCE_NUMBER``: Spark's own
``format("kafka")`` sink, writing into a 100-partition topic created just before, expired a
partition's records after its 120 s ``delivery.timeout.ms`` that way (docs/performance.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from kafka_direct.errors import KafkaClientError

_POLL_INTERVAL_S = 0.05
#: What a partition's leader answers while it is not serving a new topic yet. librdkafka does not
#: flag these as retriable in an admin result, so they are named.
_NOT_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        # The admin client's metadata is a leader epoch ahead of the broker, for a moment.
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def _topic_names(admin: AdminClient, timeout_s: float) -> dict[str, int]:
    """Topic → partition count, from a metadata request that names no topic.

    Naming the topic would let a broker with auto-creation create it with default settings.
    """
    metadata = admin.list_topics(timeout=max(timeout_s, 0.01))
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def _client_error(action: str, exc: KafkaException) -> KafkaClientError:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError):
        return KafkaClientError(
            f"{action}: {error.str()} ({error.name()})",
            code=error.name(),
            retriable=bool(error.retriable()),
        )
    return KafkaClientError(f"{action}: {exc}")


def _not_yet_led(
    admin: AdminClient, topic: str, partitions: set[int], timeout_s: float
) -> set[int]:
    """The partitions among ``partitions`` whose leader does not answer ListOffsets yet.

    ``NOT_LEADER_OR_FOLLOWER``, ``UNKNOWN_TOPIC_OR_PARTITION``, a time-out or another retriable
    error means "not yet"; any other error is raised.
    """
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in sorted(partitions)}
    futures = admin.list_offsets(request, request_timeout=max(timeout_s, 0.01))
    pending = set()
    for tp, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError):
                raise
            if error.code() not in _NOT_YET and not error.retriable():
                raise
            pending.add(tp.partition)
    return pending


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    timeout_s: float = 30,
    replication_factor: int = 1,
    *,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Create ``topic``; return once metadata shows all its partitions and each partition's leader
    serves it. For tests, benchmarks and the demo CLIs.

    ``settings`` are more client settings for the admin client (a secured cluster's
    ``security.protocol``, SASL and TLS keys, a ``logger``); ``bootstrap_servers`` wins over
    theirs.
    """
    deadline = time.monotonic() + timeout_s
    action = f"Could not create topic '{topic}' ({partitions} partitions) on {bootstrap_servers}"
    try:
        # Inside the try: librdkafka refuses a bad setting when the client is created.
        admin = AdminClient({**(settings or {}), "bootstrap.servers": bootstrap_servers})
        futures = admin.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    config=dict(config or {}),
                )
            ],
            operation_timeout=timeout_s,
        )
        futures[topic].result(timeout=timeout_s)
        while _topic_names(admin, deadline - time.monotonic()).get(topic) != partitions:
            if time.monotonic() >= deadline:
                raise KafkaClientError(
                    f"{action}: it was created but metadata did not show {partitions} partitions "
                    f"within {timeout_s:g} s."
                )
            time.sleep(_POLL_INTERVAL_S)
        pending = set(range(partitions))
        while pending := _not_yet_led(admin, topic, pending, deadline - time.monotonic()):
            if time.monotonic() >= deadline:
                raise KafkaClientError(
                    f"{action}: it was created but the leaders of partitions "
                    f"{sorted(pending)[:10]} did not serve it within {timeout_s:g} s."
                )
            time.sleep(_POLL_INTERVAL_S)
    except KafkaException as exc:
        raise _client_error(action, exc) from exc


def delete_topic(bootstrap_servers: str, topic: str, timeout_s: float = 30) -> None:
    """Delete ``topic`` and wait until metadata no longer lists it. For tests and benchmarks."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    deadline = time.monotonic() + timeout_s
    action = f"Could not delete topic '{topic}' on {bootstrap_servers}"
    try:
        admin.delete_topics([topic], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
        while topic in _topic_names(admin, deadline - time.monotonic()):
            if time.monotonic() >= deadline:
                raise KafkaClientError(
                    f"{action}: it was deleted but metadata still listed it after {timeout_s:g} s."
                )
            time.sleep(_POLL_INTERVAL_S)
    except KafkaException as exc:
        raise _client_error(action, exc) from exc
