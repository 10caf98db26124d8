"""What a test Kafka broker is made of: its Maven coordinates, server.properties, log4j2 and JVM
options. Pure logic, no I/O: used by :mod:`kafka_direct.testing.kafka_cluster` in the user's
(or the test suite's) process, and unit-tested table-style.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "KAFKA_VERSION",
    "LOG4J_VERSION",
    "jvm_options",
    "kafka_coordinates",
    "log4j2_properties",
    "normalize_broker_config",
    "server_properties",
]

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# The log4j2 that kafka_2.13 itself depends on; the slf4j binding must match it.
LOG4J_VERSION = "2.24.3"


def kafka_coordinates(version: str = KAFKA_VERSION) -> list[str]:
    """Maven coordinates for a broker: Kafka, plus the log4j2 parts its POM leaves out.

    The POM brings slf4j-api 1.7 but no binding (only the release tarball ships one), so without
    ``log4j-slf4j-impl`` the broker would log nothing. log4j-api and log4j-core are declared too,
    so every 4.x POM gets the same logging stack.
    """
    return [
        f"org.apache.kafka:kafka_{SCALA_VERSION}:{version}",
        f"org.apache.logging.log4j:log4j-api:{LOG4J_VERSION}",
        f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    ]


def normalize_broker_config(config: Mapping[str, object]) -> dict[str, str]:
    """Keyword-style names (``log_retention_ms``) to Kafka's (``log.retention.ms``); values to text.

    Kafka's broker property names use dots and no underscores, so the mapping is unambiguous.
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        name = key.replace("_", ".")
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif value is None:
            raise ValueError(f"Broker property {name!r} has no value (None); give a string.")
        else:
            out[name] = str(value)
    return out


def server_properties(
    *,
    node_id: int,
    port: int,
    controller_port: int,
    voters: Mapping[int, int],
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
) -> str:
    """server.properties for one KRaft node in combined mode (broker and controller).

    ``voters`` maps every node id to its controller port: a static quorum, so the storage is
    formatted without ``--standalone``. Replication defaults follow the cluster size: with three
    or more nodes, internal topics and new topics get three replicas and two must be in sync.
    """
    size = len(voters)
    replicas = min(size, 3)
    min_isr = 2 if size >= 3 else 1
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{vid}@127.0.0.1:{vport}" for vid, vport in sorted(voters.items())
        ),
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        # Replication as a production cluster of this size would have it.
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        # Internal topics default to 50 partitions: minutes of leader elections on 2 cores.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        # A SIGKILLed node can register again only once its old session has expired: the
        # default (9 s) would dominate every restart in the fault tests.
        "broker.session.timeout.ms": "4000",
        "broker.heartbeat.interval.ms": "500",
        # Small thread pools and cleaner buffer: a test broker on a shared 2-core machine.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.replica.fetchers": "1",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": "2097152",
        # No time-based retention by default: test data carries fixed CreateTimes years in the
        # past, which Kafka's default seven days would delete at the first retention check.
        # Retention tests set retention.ms on their own topics.
        "log.retention.ms": "-1",
        # Retention and compaction tests must not wait Kafka's default minutes for a check.
        "log.retention.check.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "log.initial.task.delay.ms": "0",
        "log.segment.delete.delay.ms": "1000",
    }
    props.update(overrides or {})
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j2_properties(level: str = "INFO") -> str:
    """Everything to the console, which the cluster redirects into the broker's one log file."""
    return (
        f"rootLogger.level={level}\n"
        "rootLogger.appenderRef.out.ref=OUT\n"
        "appender.out.type=Console\n"
        "appender.out.name=OUT\n"
        "appender.out.layout.type=PatternLayout\n"
        "appender.out.layout.pattern=[%d] %p %m (%c)%n\n"
        # The state-change and request loggers repeat every partition move: noise in tests.
        "logger.state.name=state.change.logger\n"
        "logger.state.level=WARN\n"
        "logger.request.name=kafka.request.logger\n"
        "logger.request.level=WARN\n"
    )


def jvm_options(heap_mb: int) -> list[str]:
    """A small heap, the serial collector and the C1 compiler only: quick to start, light on CPU.

    A test broker spends its life starting and moving little data, where C2's optimisation and a
    parallel collector's threads cost more than they bring on two cores.
    """
    return [
        f"-Xmx{heap_mb}m",
        f"-Xms{min(heap_mb, 64)}m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:MaxDirectMemorySize=256m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        "-Dlog4j2.disable.jmx=true",
    ]
