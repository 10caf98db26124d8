"""A real Apache Kafka cluster for tests: KRaft brokers as plain JVM processes on loopback.

Plain library: runs in the user's (or the test suite's) process and starts one JVM per broker.

    with KafkaCluster(brokers=3) as cluster:
        cluster.bootstrap_servers            # "127.0.0.1:PORT,..."
        cluster.kill_broker(2)               # SIGKILL
        cluster.start_broker(2)              # again, on the same log directories

The jars of Apache Kafka come from Maven Central through :func:`~kafka_direct.testing.jars.
fetch_maven_jars` (Ivy from PySpark; cached once per version). Each node runs in KRaft combined
mode (``process.roles=broker,controller``) with a static quorum of all nodes, so with three
brokers the controller quorum survives one kill. With three or more brokers the internal topics
and the default replication factor are 3 and ``min.insync.replicas`` is 2, as in production.

Each broker logs to one file (``cluster.log_path(id)``); a broker that dies while starting raises
:class:`KafkaClusterError` with the end of that file. Heap and GC are sized for a small machine
(docs/brokers.md has the measurements). Every process is killed by pid on :meth:`stop`, on leaving
the ``with`` block, and at interpreter exit; the temporary directory is removed with them. If
the process dies without exit handlers (SIGKILL, a crash), :mod:`~kafka_direct.testing.reaper`
kills the brokers; they do not die with the thread that started them.

``python -m kafka_direct.testing.kafka_cluster --brokers 1`` runs a cluster in the foreground and
prints ``KAFKA_BOOTSTRAP_SERVERS=...``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
import uuid
from base64 import urlsafe_b64encode
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kafka_direct.errors import KafkaDirectError
from kafka_direct.testing.broker_config import (
    KAFKA_VERSION,
    jvm_options,
    kafka_coordinates,
    log4j2_properties,
    normalize_broker_config,
    server_properties,
)
from kafka_direct.testing.cluster_probe import (
    broker_answers,
    group_coordinator_ready,
    metadata_broker_ids,
    port_accepts,
)
from kafka_direct.testing.jars import fetch_maven_jars, find_java
from kafka_direct.testing.ports import free_port
from kafka_direct.testing.reaper import forget, watch

__all__ = [
    "KAFKA_VERSION",
    "KAFKA_VERSION_ENV",
    "KafkaCluster",
    "KafkaClusterError",
    "default_kafka_version",
    "kafka_jars",
    "main",
]

#: Chooses the Kafka release of every cluster that names none (scripts/kafka-versions.sh).
KAFKA_VERSION_ENV = "KAFKA_DIRECT_KAFKA_VERSION"

_LOG_TAIL_LINES = 30
_FORMAT_TIMEOUT_S = 120.0


class KafkaClusterError(KafkaDirectError):
    """A broker of :class:`KafkaCluster` could not be formatted, started or reached."""


def default_kafka_version() -> str:
    """``$KAFKA_DIRECT_KAFKA_VERSION`` when set, else :data:`KAFKA_VERSION`.

    So a whole test run, whose tests start their own clusters, runs on another Kafka release
    without a change to any test (docs/testing.md, "Kafka versions").
    """
    chosen = os.environ.get(KAFKA_VERSION_ENV, "").strip()
    if not chosen:
        return KAFKA_VERSION
    if not re.fullmatch(r"\d+\.\d+\.\d+", chosen):
        raise KafkaClusterError(
            f"{KAFKA_VERSION_ENV}={chosen!r}: expected an Apache Kafka release as Maven Central "
            f"names it, such as 3.9.1 or {KAFKA_VERSION}; unset it to use the default "
            f"({KAFKA_VERSION})."
        )
    return chosen


def kafka_jars(version: str | None = None) -> list[Path]:
    """Apache Kafka's broker jars (and a log4j2 binding for its slf4j logs), fetched once."""
    version = version or default_kafka_version()
    return fetch_maven_jars(kafka_coordinates(version), f"kafka-{version}")


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid).

    Never one that starts with '-': ``kafka-storage format -t -abc`` reads it as an option (one
    id in 64 did, and failed a CI run). Kafka's own ``Uuid.randomUuid`` draws again for the same
    reason.
    """
    while True:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    started_s: list[float] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class KafkaCluster:
    """``brokers`` Apache Kafka nodes (KRaft, combined broker+controller) on 127.0.0.1.

    ``broker_config`` overrides server properties for every broker: Kafka's names with dots, or
    with underscores for keyword arguments (``log_retention_check_interval_ms=500``). Booleans
    become ``true``/``false``. Nothing starts before :meth:`start` or ``with``.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        kafka_version: str | None = None,
        heap_mb: int = 448,
        startup_timeout_s: float = 180.0,
        **broker_config: object,
    ) -> None:
        if brokers < 1:
            raise KafkaClusterError(f"KafkaCluster(brokers={brokers!r}): expected 1 or more.")
        self.kafka_version = kafka_version or default_kafka_version()
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self._count = brokers
        self._overrides = normalize_broker_config(broker_config)
        self._nodes: dict[int, _Node] = {}
        self._root: Path | None = None
        self._classpath = ""
        self._java = ""

    # ----------------------------------------------------------------------------- properties
    @property
    def broker_ids(self) -> list[int]:
        return sorted(self._nodes) if self._nodes else list(range(1, self._count + 1))

    @property
    def bootstrap_servers(self) -> str:
        if not self._nodes:
            raise KafkaClusterError("The Kafka cluster is not started: call start() first.")
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes.values())

    def broker_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self._node(node_id).port}"

    def log_path(self, node_id: int) -> Path:
        return self._node(node_id).log_path

    def pid(self, node_id: int) -> int | None:
        process = self._node(node_id).process
        return None if process is None or process.poll() is not None else process.pid

    def start_times_s(self, node_id: int) -> list[float]:
        """Seconds from launch to an answering broker, for each start of this node."""
        return list(self._node(node_id).started_s)

    # ----------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> KafkaCluster:
        if self._nodes:
            raise KafkaClusterError("This KafkaCluster was already started; create a new one.")
        self._java = find_java()
        self._classpath = os.pathsep.join(str(p) for p in kafka_jars(self.kafka_version))
        self._root = Path(tempfile.mkdtemp(prefix="kafka-direct-kafka-"))
        atexit.register(self.stop)
        try:
            self._create_nodes()
            self._format_all()
            for node in self._nodes.values():
                self._launch(node)
            self._wait_ready(list(self._nodes.values()))
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def stop(self, keep_logs: bool = False) -> None:
        """SIGKILL every broker (by pid) and remove the cluster's directory.

        A test cluster's data is thrown away, so there is no controlled shutdown to wait for.
        With ``keep_logs`` (used when a start fails) the directory stays for the error to cite.
        """
        for node in self._nodes.values():
            self._kill(node)
        if self._root is not None and not keep_logs:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        atexit.unregister(self.stop)

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one broker; its log directories stay for :meth:`start_broker`."""
        node = self._node(node_id)
        if not node.alive:
            raise KafkaClusterError(f"Broker {node_id} is not running; nothing to kill.")
        self._kill(node)

    def start_broker(self, node_id: int) -> None:
        """Start a killed broker again on the same ports and log directories; wait until ready."""
        node = self._node(node_id)
        if node.alive:
            raise KafkaClusterError(
                f"Broker {node_id} is already running (pid {self.pid(node_id)})."
            )
        self._launch(node)
        self._wait_ready([node])

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP one broker: its sockets stay open but nothing answers (a hung broker)."""
        node = self._node(node_id)
        if not node.alive:
            raise KafkaClusterError(f"Broker {node_id} is not running; nothing to pause.")
        os.kill(node.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        node.paused = True

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT a paused broker."""
        node = self._node(node_id)
        if node.alive:
            os.kill(node.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        node.paused = False

    # ----------------------------------------------------------------------------- internals
    def _node(self, node_id: int) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KafkaClusterError(
                f"No broker {node_id!r} in this cluster: its ids are {self.broker_ids}."
            ) from None

    def _create_nodes(self) -> None:
        assert self._root is not None
        taken: set[int] = set()
        for node_id in range(1, self._count + 1):
            ports = [free_port(taken=taken), free_port(taken=taken)]
            directory = self._root / f"broker-{node_id}"
            directory.mkdir()
            self._nodes[node_id] = _Node(node_id, ports[0], ports[1], directory)
        voters = {n.node_id: n.controller_port for n in self._nodes.values()}
        for node in self._nodes.values():
            (node.directory / "server.properties").write_text(
                server_properties(
                    node_id=node.node_id,
                    port=node.port,
                    controller_port=node.controller_port,
                    voters=voters,
                    data_dir=node.data_dir,
                    overrides=self._overrides,
                )
            )
            (node.directory / "log4j2.properties").write_text(log4j2_properties())

    def _java_command(self, node: _Node, main: list[str], heap_mb: int) -> list[str]:
        return [
            self._java,
            *jvm_options(heap_mb),
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            "-cp",
            self._classpath,
            *main,
        ]

    def _format_all(self) -> None:
        """Format every node's log directory with one cluster id, in parallel JVMs."""
        cluster_id = _cluster_id()
        running = []
        for node in self._nodes.values():
            command = self._java_command(
                node,
                [
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(node.directory / "server.properties"),
                    "-g",
                ],
                heap_mb=128,
            )
            with open(node.directory / "format.log", "wb") as out:
                running.append((node, _spawn(command, out)))
        for node, process in running:
            try:
                code = process.wait(timeout=_FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            forget(process.pid)
            if code != 0:
                raise KafkaClusterError(
                    f"Formatting broker {node.node_id}'s log directory failed (exit {code}): "
                    + _tail(node.directory / "format.log")
                )

    def _launch(self, node: _Node) -> None:
        command = self._java_command(
            node, ["kafka.Kafka", str(node.directory / "server.properties")], self.heap_mb
        )
        with open(node.log_path, "ab") as log:
            node.process = _spawn(command, log)
        node.paused = False
        node.started_s.append(-time.monotonic())

    def _wait_ready(self, nodes: list[_Node]) -> None:
        """Each node answers a metadata request in which it is registered."""
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(nodes)
        while pending:
            node = pending[0]
            if node.process is None or node.process.poll() is not None:
                code = None if node.process is None else node.process.returncode
                raise KafkaClusterError(
                    f"Kafka broker {node.node_id} exited while starting (exit {code}); the end of "
                    f"its log {node.log_path}:\n{_tail(node.log_path)}"
                )
            if time.monotonic() > deadline:
                raise KafkaClusterError(
                    f"Kafka broker {node.node_id} did not answer within "
                    f"{self.startup_timeout_s:.0f} s; the end of its log {node.log_path}:\n"
                    f"{_tail(node.log_path)}"
                )
            address = f"127.0.0.1:{node.port}"
            if port_accepts("127.0.0.1", node.port) and broker_answers(address, node.node_id):
                node.started_s[-1] += time.monotonic()
                pending.pop(0)
            else:
                time.sleep(0.1)
        if len(nodes) == len(self._nodes):
            if len(nodes) > 1:
                self._wait_all_registered(deadline)
            # Ready as a production cluster is: with __consumer_offsets created and loaded.
            remaining = max(deadline - time.monotonic(), 1.0)
            problem = group_coordinator_ready(self.bootstrap_servers, remaining)
            if problem is not None:
                raise KafkaClusterError(
                    f"The group coordinator did not answer within {self.startup_timeout_s:.0f} s "
                    f"({problem}); see {', '.join(str(n.log_path) for n in self._nodes.values())}."
                )

    def _wait_all_registered(self, deadline: float) -> None:
        wanted = set(self._nodes)
        while metadata_broker_ids(self.bootstrap_servers) != wanted:
            if time.monotonic() > deadline:
                raise KafkaClusterError(
                    f"Only brokers {sorted(metadata_broker_ids(self.bootstrap_servers))} of "
                    f"{sorted(wanted)} registered within {self.startup_timeout_s:.0f} s; see "
                    f"{', '.join(str(n.log_path) for n in self._nodes.values())}."
                )
            time.sleep(0.1)

    def _kill(self, node: _Node) -> None:
        process = node.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        process.wait()
        forget(process.pid)
        node.paused = False


def _spawn(command: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start a JVM in a session of its own and have the reaper kill it if this process dies.

    Its own session (and so process group), so a Ctrl-C in the terminal does not reach it before
    :meth:`KafkaCluster.stop` does, and the reaper can kill the whole group. atexit does not run
    when this process is killed or crashes (a segfault in a native client, a test runner's
    timeout), and a broker left behind holds 150 MB and its ports: :mod:`.reaper` says why not
    ``PR_SET_PDEATHSIG``, which would kill the broker with the thread that started it.
    """
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        watch(process.pid)
    except OSError:
        process.kill()
        process.wait()
        raise
    return process


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or "(the log is empty)"


def main(argv: list[str] | None = None) -> int:
    """Run a cluster in the foreground until interrupted (for manual tests and scripts)."""
    parser = argparse.ArgumentParser(prog="python -m kafka_direct.testing.kafka_cluster")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument(
        "--kafka-version", default=None, help=f"default: ${KAFKA_VERSION_ENV} or {KAFKA_VERSION}"
    )
    parser.add_argument("--fetch-only", action="store_true", help="fetch the jars, then exit")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.fetch_only:
        jars = kafka_jars(args.kafka_version)
        sys.stdout.write(f"{len(jars)} jars in {jars[0].parent}\n")
        return 0
    overrides: dict[str, Any] = dict(item.split("=", 1) for item in args.set)
    with KafkaCluster(args.brokers, kafka_version=args.kafka_version, **overrides) as cluster:
        sys.stdout.write(f"KAFKA_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}\n")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
