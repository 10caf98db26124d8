"""Probes for a starting Kafka broker: free ports, an accepting socket, a metadata answer.

Plain library: runs in the process that owns a :class:`~kafka_direct.testing.KafkaCluster`.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

__all__ = [
    "broker_answers",
    "broker_ports",
    "free_port",
    "group_coordinator_ready",
    "metadata_broker_ids",
    "port_accepts",
]

# Quiet, quick probes: no librdkafka connect errors on stderr while the JVM starts, and no
# reconnect backoff growing to seconds.
_PROBE_CONFIG = {"log_level": 0, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}


#: Where the kernel reads its ephemeral port range (Linux).
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: How many ports below that range the test brokers choose from.
_SPAN = 12000


def broker_ports(ephemeral_low: int | None) -> range | None:
    """The ports a test broker takes: just below the kernel's ephemeral range, or None (then
    any free port) when that range is unknown or starts too low to leave a span below it.

    Why not ``bind(0)``: that hands out ports from the ephemeral range, where Spark's own
    servers get theirs too (a ``collect()``'s result socket accepts one connection). A broker's
    port may be taken by such a server before the broker binds it, and a stopped broker's port
    stays in the retries of any client left over; either may then connect to Spark's socket
    first, and the query fails (``CANNOT_OPEN_SOCKET``)."""
    if ephemeral_low is None or ephemeral_low - _SPAN < 1024:
        return None
    return range(ephemeral_low - _SPAN, ephemeral_low)


def _ephemeral_low() -> int | None:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> int | None:
    """``port`` (0: one the kernel picks) if it can be bound on the loopback now, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(sock.getsockname()[1])


def free_port(taken: set[int]) -> int:
    """A loopback port free now, not handed out before in this cluster, and outside the
    kernel's ephemeral range where it can (:func:`broker_ports`)."""
    ports = broker_ports(_ephemeral_low())
    tries = 0
    while True:
        tries += 1
        # After many busy ports in a row, any free port the kernel gives is better than none.
        wanted = random.choice(ports) if ports is not None and tries <= 1000 else 0
        port = _bindable(wanted)
        if port is not None and port not in taken:
            taken.add(port)
            return port


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
