"""The receiver stream's rules, as plain decisions: the rate limit, when a block is closed, when
receivers pause, and when a receiver that keeps dying is given up on. Pure: plain library (no
Spark, no Kafka client); the receivers on executors and the supervisor on the Spark driver ask it.

- :class:`RateLimiter` is Spark's receiver rate limit (``spark.streaming.receiver.maxRate``,
  here ``maxRatePerReceiver``): a token bucket of records per second, whose burst is one block
  interval's worth, so that a block never holds more than the rate allows.
- :class:`BlockCutter` closes a block every ``blockInterval`` (Spark's
  ``spark.streaming.blockInterval``), or earlier once it holds :data:`MAX_BLOCK_BYTES` (8 MB),
  so a block's size is bounded whatever the rate.
- :class:`PauseRule` is the back-pressure of the log: a receiver pauses its partitions while the
  log holds ``maxPendingBlocks`` or more unprocessed blocks, and resumes below. A receiver checks
  before it starts a block and may finish the block it has, so the log holds at most
  ``maxPendingBlocks + numReceivers`` blocks.
- :class:`RestartPolicy` says when the driver restarts a dead receiver, and when it stops trying.
- :func:`check_slots`: receivers hold task slots, so the batches need more (cores > receivers).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafka_direct.errors import ConfigurationError

__all__ = [
    "MAX_BLOCK_BYTES",
    "BlockCutter",
    "IdleWatch",
    "PauseRule",
    "RateLimiter",
    "RestartDecision",
    "RestartPolicy",
    "SlotLedger",
    "check_slots",
    "idle_warning",
    "task_slots",
]

#: A block is closed once its Arrow buffers reach this size, even before its interval ends: a
#: receiver that resumes with a backlog behind it would otherwise fill one block per interval
#: at full speed, and its memory would follow (docs/performance.md).
MAX_BLOCK_BYTES = 8 * 1024 * 1024


class RateLimiter:
    """At most ``rate`` records per second (0 = no limit), in bursts of ``burst_s`` seconds."""

    def __init__(
        self, rate: float, burst_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self._clock = clock
        self._capacity = max(1.0, rate * burst_s)
        self._tokens = self._capacity
        self._last = clock()

    @property
    def limited(self) -> bool:
        return self.rate > 0

    def allowance(self, most: int) -> int:
        """How many records may be taken now, at most ``most``."""
        if not self.limited:
            return most
        self._refill()
        return min(most, int(self._tokens))

    def take(self, n: int) -> None:
        """Count ``n`` records taken (after :meth:`allowance`)."""
        if self.limited:
            self._refill()
            self._tokens -= n

    def wait_s(self) -> float:
        """Seconds until one more record may be taken (0 if it may now)."""
        if not self.limited:
            return 0.0
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now


@dataclass(frozen=True)
class BlockCutter:
    """When the block being filled is closed and logged."""

    interval_s: float
    max_bytes: int = MAX_BLOCK_BYTES

    def due(self, opened_at: float | None, now: float, size: int) -> bool:
        if opened_at is None:
            return False  # nothing received since the last block
        return size >= self.max_bytes or now - opened_at >= self.interval_s


@dataclass(frozen=True)
class PauseRule:
    """Pause while the log holds ``max_pending`` or more unprocessed blocks."""

    max_pending: int

    def paused(self, pending: int) -> bool:
        return pending >= self.max_pending


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay_s: float
    consecutive: int  # failures in a row, this one included


class RestartPolicy:
    """Restart a dead receiver after ``delay_s`` (Spark's ``receiverRestartDelay``), unless it
    died ``max_consecutive`` times in a row, each time within ``healthy_after_s`` of its start:
    a receiver that cannot run (a bad setting, a broker it cannot reach) should stop the stream
    with its reason rather than restart forever. A run that lasted longer resets the count.
    """

    def __init__(
        self, *, delay_s: float = 2.0, max_consecutive: int = 5, healthy_after_s: float = 30.0
    ) -> None:
        self.delay_s = delay_s
        self.max_consecutive = max_consecutive
        self.healthy_after_s = healthy_after_s
        self._consecutive = 0

    def failed(self, ran_for_s: float, *, fatal: bool = False) -> RestartDecision:
        """A receiver died after running ``ran_for_s``; ``fatal`` when retrying cannot help."""
        self._consecutive = 1 if ran_for_s >= self.healthy_after_s else self._consecutive + 1
        restart = not fatal and self._consecutive < self.max_consecutive
        return RestartDecision(restart, self.delay_s, self._consecutive)


def task_slots(
    master: str, default_parallelism: int, task_cpus: int, cpu_count: int
) -> tuple[int, bool]:
    """Spark's task slots for ``master``, and whether it is a local master (one JVM)."""
    local = re.fullmatch(r"local(?:\[(\*|\d+)(?:\s*,\s*\d+)?\])?", master.strip())
    if local:
        cores = cpu_count if local.group(1) == "*" else int(local.group(1) or 1)
    else:
        cluster = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,.*\]", master.strip())
        cores = int(cluster.group(1)) * int(cluster.group(2)) if cluster else default_parallelism
    return max(0, cores // max(1, task_cpus)), local is not None


class SlotLedger:
    """The receivers running in this driver, per Spark application: each holds a task slot for
    as long as its stream runs, so a new stream must count every stream's receivers, not only
    its own (two streams of one receiver each on ``local[2]`` left no slot for any batch, and
    hung without a word). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, int]] = {}

    def others(self, app: str, run: str) -> int:
        """Receivers held in application ``app`` by streams other than ``run``."""
        with self._lock:
            return sum(n for r, n in self._held.get(app, {}).items() if r != run)

    def hold(self, app: str, run: str, receivers: int) -> None:
        with self._lock:
            self._held.setdefault(app, {})[run] = receivers

    def release(self, app: str, run: str) -> None:
        with self._lock:
            self._held.get(app, {}).pop(run, None)


class IdleWatch:
    """Which receivers have run without a partition for ``after_s`` seconds, each said once
    per episode (a receiver that gets partitions and loses them again is said again).

    A group member without partitions receives nothing and says nothing: the group's other
    members (of another application, or of an earlier run that has not left yet) may hold every
    partition, or the group may never finish a rebalance. ``idle`` is fed each receiver's last
    report; the driver warns for the ones it returns.
    """

    def __init__(self, after_s: float = 30.0) -> None:
        self.after_s = after_s
        self._since: dict[int, float] = {}
        self._said: set[int] = set()

    def idle(self, reports: Iterable[tuple[int, str, bool]], now: float) -> list[int]:
        """``reports``: (receiver, state, has partitions). The receivers to warn about now."""
        due = []
        for receiver, state, assigned in reports:
            if state not in ("running", "paused") or assigned:
                self._since.pop(receiver, None)
                self._said.discard(receiver)
                continue
            since = self._since.setdefault(receiver, now)
            if now - since >= self.after_s and receiver not in self._said:
                self._said.add(receiver)
                due.append(receiver)
        return due


def idle_warning(receivers: list[int], group: str, topics: Iterable[str], seconds: float) -> str:
    """The warning for receivers that have had no partition for ``seconds``."""
    named = ", ".join(str(r) for r in receivers)
    return (
        f"Receiver(s) {named} of group '{group}' have had no partition of "
        f"{', '.join(topics)} for {seconds:g} s and receive nothing. Check the group's members "
        f"('kafka-consumer-groups --describe --group {group} --members'): another application, "
        "or members of an earlier run that have not left yet (they are dropped after the "
        "group's session.timeout.ms), may hold the partitions; more receivers than partitions "
        "leaves some idle; and a group that never finishes a rebalance shows no members with "
        "partitions"
    )


def check_slots(
    receivers: int,
    slots: int,
    *,
    local: bool,
    master: str,
    task_cpus: int,
    others: int = 0,
) -> None:
    """Refuse a stream whose receivers would leave no task slot for its batches: each receiver
    holds a slot for as long as the stream runs (Spark Streaming's rule: cores > receivers).
    ``others``: receivers of the application's other running streams, which hold slots too."""
    if slots > receivers + others:
        return
    need = receivers + others + 1
    cpus = f" with spark.task.cpus={task_cpus}" if task_cpus > 1 else ""
    if local:
        fix = (
            f"Start Spark with spark.master=local[{need * task_cpus}] or more (local cores are "
            "threads, so more than the machine's CPUs works), or pass fewer numReceivers."
        )
    else:
        fix = (
            "Give the application more cores (spark.executor.instances x spark.executor.cores, "
            "or spark.cores.max on a standalone cluster), or pass fewer numReceivers."
        )
    running = (
        f" Other receiver streams of this application hold {others} slot(s) already "
        f"({receivers} for this one)."
        if others
        else ""
    )
    if others:
        fix = fix.replace(
            "pass fewer numReceivers", "stop another stream, or pass fewer numReceivers"
        )
    raise ConfigurationError(
        "numReceivers",
        receivers,
        f"fewer receivers than Spark's task slots ({slots} for spark.master={master}{cpus})",
        f"Each receiver occupies a task slot for as long as the stream runs, and the batches "
        f"need at least one more: {need} slots in all.{running} {fix}",
    )
