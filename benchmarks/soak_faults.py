"""The real-Kafka soak's faults and its driver process. Runs in the soak's own process (the one
that owns the brokers and starts the driver).

Five faults, each made to hit what its name says:

- ``kill-leader``: SIGKILL the leader of a source partition that is not the active controller;
  once another replica leads, start it again on its log directories;
- ``kill-controller``: SIGKILL the active controller (the metadata quorum's leader, read from the
  running nodes' ``quorum-state`` files: librdkafka has no DescribeMetadataQuorum); once another
  node leads the quorum, start it again;
- ``pause-broker``: SIGSTOP a source partition's leader (not the controller) until the controller
  has fenced it and moved its leadership (past ``broker.session.timeout.ms``, 4 s here), and at
  least ``PAUSE_S``; then SIGCONT;
- ``kill-driver``: SIGKILL the driver, its JVM and every Python process under it, while the
  exactly-once query has a micro-batch in flight (in its offset log, not in its commit log, so
  that the restart replays it), then a new driver on the same checkpoints and offset store;
- ``kill-worker``: SIGKILL the Python worker of the driver's Spark (a process forked by the
  ``pyspark.daemon`` that serves tasks) that used the most CPU over half a second, again until
  Spark logs a failed task: only then was a worker killed mid-task.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_direct.testing.kafka_cluster import KafkaCluster

DRIVER = Path(__file__).with_name("soak_driver.py")
KINDS = {
    "kill-leader": "partition leader SIGKILL + restart",
    "kill-controller": "active controller SIGKILL + restart",
    "pause-broker": "leader SIGSTOP past session timeout, SIGCONT",
    "kill-driver": "driver SIGKILL + restart on checkpoint",
    "kill-worker": "Python worker SIGKILL mid-task",
}
PAUSE_S = 8.0
WAIT_S = 240.0
ELECT_AFTER_S = 5.0
WORKER_ATTEMPTS = 15
# A kill that hits a task fails it within a second (Spark's side of the worker's socket ends);
# a failure seen later still counts at the next attempt, whose count starts where the first did.
KILL_SETTLE_S = 5.0


class SoakError(RuntimeError):
    """A fault could not be injected or the cluster did not come back."""


@dataclass
class Fault:
    kind: str
    detail: str
    ended_at: float  # wall time: the restart, the resume, the kill
    recovered_s: dict[str, float | None]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SoakError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader broker id (-1 while none), from a fresh client's metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    metadata = admin.list_topics(topic, timeout=10)
    return {p: int(m.leader) for p, m in metadata.topics[topic].partitions.items()}


def elect_preferred(bootstrap: str, topic: str, partitions: list[int]) -> None:
    """Ask for a preferred leader election on ``partitions``; a partition whose preferred replica
    leads already, or is not in sync yet, is left as it is (the caller polls again)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    tps = [TopicPartition(topic, p) for p in partitions]
    with contextlib.suppress(KafkaException, TimeoutError):
        admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=30)


def quorum_leader(cluster: KafkaCluster) -> int | None:
    """The metadata quorum's leader in the newest epoch any running node recorded; None while an
    election runs."""
    newest: tuple[int, int] | None = None
    for node in cluster.broker_ids:
        if cluster.pid(node) is None:
            continue
        path = cluster.log_path(node).parent / "data" / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being rewritten
        epoch, leader = int(state.get("leaderEpoch", -1)), int(state.get("leaderId", -1))
        if newest is None or epoch > newest[0]:
            newest = (epoch, leader)
    return None if newest is None or newest[1] < 0 else newest[1]


def active_controller(cluster: KafkaCluster) -> int:
    found: list[int | None] = [None]

    def settled() -> bool:
        found[0] = quorum_leader(cluster)
        return found[0] is not None and cluster.pid(found[0]) is not None

    wait_until(settled, WAIT_S, "an active controller that is running")
    assert found[0] is not None
    return found[0]


class Driver:
    """The soak's driver process; each (re)start is a run with a log of its own."""

    def __init__(self, bootstrap: str, topic: str, work: Path) -> None:
        self.args = [bootstrap, topic, str(work)]
        self.work = work
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.runs += 1
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        with open(self.work / f"driver-{self.runs}.log", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), *self.args, str(self.runs)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # so a kill takes the JVM and the Python workers too
            )

    def died(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and every Python process under it (PySpark's daemons run
        in process groups of their own, so the driver's group is not enough)."""
        assert self.proc is not None
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        try:
            code = self.proc.wait(180)
        except subprocess.TimeoutExpired:
            code = -9
        self.kill()  # whatever the driver left behind
        return code

    def in_flight(self, pipe: str) -> int | None:
        """The id of the micro-batch the query ``pipe`` started and has not finished, if any:
        one in its checkpoint's offset log and not yet in its commit log."""
        checkpoint = self.work / f"checkpoint-{pipe}"

        def last(log: str) -> int:
            names = [p.name for p in (checkpoint / log).glob("[0-9]*")]
            return max((int(n) for n in names if n.isdigit()), default=-1)

        started = last("offsets")
        return started if started > last("commits") else None

    def task_failures(self) -> int:
        """Spark's "Exception in task" lines in this run's log: one per failed task attempt
        (the executor logs it at ERROR, the level the driver runs at)."""
        path = self.work / f"driver-{self.runs}.log"
        return path.read_text(errors="replace").count("Exception in task")

    def log_tail(self, lines: int = 15) -> str:
        path = self.work / f"driver-{self.runs}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


def descendants(root: int) -> list[int]:
    """Every live process under ``root``, from /proc (children before grandchildren)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def python_workers(driver: Driver) -> list[int]:
    """The Python workers that run Spark tasks: processes forked by the ``pyspark.daemon``
    that serves tasks (not the daemons that plan reads, create data sources and the like)."""
    assert driver.proc is not None
    under = descendants(driver.proc.pid)
    daemons = {
        pid
        for pid in under
        if (args := [a for a in _cmdline(pid) if a])[-2:] == ["-m", "pyspark.daemon"]
        or args[-1:] == ["pyspark.worker"]
    }
    workers = []
    for pid in under:
        stat = _proc_stat(pid)
        if stat is not None and stat[0] in daemons:
            workers.append(pid)
    return workers


def busiest_worker(driver: Driver, sample_s: float = 0.5) -> tuple[int, int] | None:
    """(pid, CPU ticks used over ``sample_s``) of the busiest Python worker, or None."""
    before = {pid: _proc_stat(pid) for pid in python_workers(driver)}
    time.sleep(sample_s)
    used = []
    for pid, stat in before.items():
        after = _proc_stat(pid)
        if stat is not None and after is not None:
            used.append((after[1] - stat[1], pid))
    if not used:
        return None
    ticks, pid = max(used)
    return pid, ticks


class Injector:
    """Injects the faults on a cluster, a source topic and a driver."""

    def __init__(self, cluster: KafkaCluster, topic: str, driver: Driver) -> None:
        self.cluster = cluster
        self.topic = topic
        self.driver = driver

    def _leader_not_controller(self) -> tuple[int, int]:
        controller = active_controller(self.cluster)
        bootstrap = self.cluster.bootstrap_servers
        current: dict[int, int] = {}
        elect_at = [time.monotonic() + ELECT_AFTER_S]

        def found() -> bool:
            current.update(leaders(bootstrap, self.topic))
            if any(leader not in (controller, -1) for leader in current.values()):
                return True
            if time.monotonic() > elect_at[0]:
                # Restarted brokers do not lead again until Kafka's automatic rebalance (every
                # 300 s by default): after a leader and a controller restart, the controller can
                # lead every partition. A preferred election gives them back.
                elect_at[0] = time.monotonic() + ELECT_AFTER_S
                elect_preferred(bootstrap, self.topic, list(current))
            return False

        wait_until(found, WAIT_S, f"a leader of {self.topic} that is not the controller")
        partition = next(p for p, b in sorted(current.items()) if b not in (controller, -1))
        return partition, current[partition]

    def _moved(self, partition: int, leader: int) -> Callable[[], bool]:
        bootstrap = self.cluster.bootstrap_servers
        return lambda: leaders(bootstrap, self.topic)[partition] not in (leader, -1)

    def inject(self, kind: str) -> tuple[str, float]:
        """Run one fault; return what it did and when it ended (wall time)."""
        if kind == "kill-leader":
            partition, leader = self._leader_not_controller()
            self.cluster.kill_broker(leader)
            wait_until(self._moved(partition, leader), WAIT_S, f"a new leader of p{partition}")
            self.cluster.start_broker(leader)
            return f"broker {leader} (leader of p{partition})", time.time()
        if kind == "kill-controller":
            controller = active_controller(self.cluster)
            self.cluster.kill_broker(controller)
            successor = active_controller(self.cluster)
            self.cluster.start_broker(controller)
            return f"broker {controller}, then {successor} led", time.time()
        if kind == "pause-broker":
            partition, leader = self._leader_not_controller()
            started = time.monotonic()
            self.cluster.pause_broker(leader)
            try:
                wait_until(self._moved(partition, leader), WAIT_S, f"p{partition} to move")
                fenced = time.monotonic() - started
                time.sleep(max(0.0, PAUSE_S - fenced))
            finally:
                self.cluster.resume_broker(leader)
            return f"broker {leader}, fenced after {fenced:.1f} s", time.time()
        if kind == "kill-driver":
            # Mid-batch by construction: Spark has logged the exactly-once query's batch as
            # started (its offset log) and not as done (its commit log), so a restart replays it.
            wait_until(lambda: self.driver.in_flight("eos") is not None, WAIT_S, "a batch")
            self.driver.kill()
            ended = time.time()
            flying = {pipe: self.driver.in_flight(pipe) for pipe in ("eos", "alo")}
            self.driver.start()
            shown = ", ".join(f"{p} batch {b}" for p, b in flying.items() if b is not None)
            return f"run {self.driver.runs - 1}, in flight: {shown}", ended
        if kind == "kill-worker":
            return self._kill_worker()
        raise SoakError(f"unknown fault {kind!r}: expected one of {sorted(KINDS)}")

    def _kill_worker(self) -> tuple[str, float]:
        """SIGKILL the busiest task worker until a task fails: an idle pooled worker also uses
        some CPU (its consumers' librdkafka threads), and killing one fails no task."""
        failures = self.driver.task_failures()
        attempt = 0
        give_up = time.monotonic() + WAIT_S
        while attempt < WORKER_ATTEMPTS and time.monotonic() < give_up:
            busiest = busiest_worker(self.driver)
            if busiest is None or busiest[1] == 0:
                continue  # between batches: no worker is busy
            attempt += 1
            os.kill(busiest[0], signal.SIGKILL)
            ended = time.time()
            deadline = time.monotonic() + KILL_SETTLE_S
            while time.monotonic() < deadline:
                failed = self.driver.task_failures() - failures
                if failed > 0:
                    return f"pid {busiest[0]}, kill {attempt}, {failed} task(s) failed", ended
                time.sleep(0.5)
        raise SoakError(f"no task failed after {attempt} Python worker kills")

    def heal(self) -> None:
        """Every broker runs again, unfrozen (after a fault that failed half-way)."""
        for node in self.cluster.broker_ids:
            self.cluster.resume_broker(node)
            if self.cluster.pid(node) is None:
                self.cluster.start_broker(node)
