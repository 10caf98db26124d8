"""Soak: a stream that keeps running through driver kills, broker outages and broker crashes, and
ends with every record exactly once. Runs on demand (not in the test suite)::

    python benchmarks/soak.py --tansu                 # 20 driver kills, 5 pauses, 5 crashes
    python benchmarks/soak.py --tansu --kills 2 --pauses 1 --crashes 1 --seconds 60  # quick

What runs:

- a broker that survives restarts: Tansu on S3 storage
  (:class:`kafka_direct.testing.DurableBroker`);
- a producer thread writing numbered records to every partition at ``--rate`` records/s, for
  the whole run; a record counts as produced when its delivery report gives its offset;
- the stream: ``benchmarks/soak_driver.py``, a Spark driver in a process of its own, reading
  the topic with kafka_direct into SQLite keyed by (topic, partition, offset) (an idempotent
  sink), with a checkpoint;
- the faults, in a random order (``--seed``), a random time apart (about ``--seconds`` in all),
  each injected only once the stream has recovered from the previous one:
  - **driver kill**: SIGKILL to the driver's process group (JVM and Python workers), then a new
    driver from the same checkpoint;
  - **broker pause**: SIGSTOP to the broker for 2-8 s, then SIGCONT;
  - **broker crash**: SIGKILL to the broker, 1-4 s down, then a restart on the same storage.

At the end the producer stops, each partition gets a last record of its own (Tansu's log end is
the start of the last batch, shared/BROKER.md), and the stream is given ``--catch-up`` seconds to
read everything. Then one table: the faults by kind, how many the stream recovered from and the
longest recovery (from the end of the fault, i.e. the kill, the resume or the restart, to the
first micro-batch that adds records to the sink), and the records: produced, read, lost ("not
read" if the stream did not catch up), duplicated (offsets read by two different micro-batches,
which a sink idempotent by batch id would write twice), and the raw re-deliveries (a killed
batch replayed under its own id, which the idempotent sink absorbs).

The exit status is non-zero if a record was lost or duplicated, a fault was not recovered from,
a query died by itself, or the stream did not catch up.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, Message, Producer

from kafka_direct.testing import DurableBroker
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.durable_broker import WATERMARK_SETTLE_S

DRIVER = Path(__file__).with_name("soak_tansu_driver.py")
#: How long the producer batches (see SoakProducer): also the granularity of recovery times.
LINGER_MS = 2000
KINDS = {
    "kill": "driver SIGKILL + restart",
    "pause": "broker pause (SIGSTOP/SIGCONT)",
    "crash": "broker crash + restart",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="driver SIGKILLs (default 20)")
    parser.add_argument("--pauses", type=int, default=5, help="broker pauses (default 5)")
    parser.add_argument("--crashes", type=int, default=5, help="broker crashes (default 5)")
    parser.add_argument(
        "--seconds",
        type=float,
        default=300.0,
        help="about how long the faults are spread over, recoveries aside (default 300)",
    )
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100.0, help="records/s produced in all")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument(
        "--recovery-timeout", type=float, default=240.0, help="seconds a recovery may take"
    )
    parser.add_argument(
        "--catch-up", type=float, default=300.0, help="seconds to read everything at the end"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep the checkpoint, sink and logs here"
    )
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the producer -------------------------------------------------------------------------------


class SoakProducer:
    """Numbered records to every partition at a steady rate, in a thread; keeps what was acked."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        self.topic = topic
        self.partitions = partitions
        # A few records per partition per tick, ticks as often as the rate asks.
        self.per_tick = max(1, math.ceil(rate * 0.05 / partitions))
        self.interval_s = self.per_tick * partitions / rate
        # No idempotence: its producer state would not survive the broker's crashes. A retried
        # batch may then be written twice; the copy nobody acknowledged is counted apart.
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                # Tansu on S3 writes each record batch as an object, and every fetch lists all
                # of the partition's objects (about 1 s per fetch at 1,100 objects on moto, and
                # a stream that falls behind then never catches up). One batch per partition
                # every LINGER_MS keeps a run of 20 minutes near 600 objects per partition.
                "linger.ms": LINGER_MS,
                "acks": "all",
                "message.timeout.ms": 600_000,
                "log_level": 0,
            }
        )
        self._lock = threading.Lock()
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed = 0
        self.sent = 0
        self._next = [0] * partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None:
                self.failed += 1
            else:
                self.acked[(int(msg.partition() or 0), int(msg.offset() or 0))] = msg.value()

    def send(self, partition: int) -> None:
        i = self._next[partition]
        self._next[partition] += 1
        self.sent += 1
        self._producer.produce(
            self.topic,
            value=f"soak|p{partition}|{i}".encode(),
            partition=partition,
            on_delivery=self._on_delivery,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(self.partitions):
                for _ in range(self.per_tick):
                    self.send(p)
            self._producer.poll(0)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        """Stop, deliver everything, then end each partition with a record of its own."""
        self._stop.set()
        self._thread.join()
        self._flush()
        time.sleep(WATERMARK_SETTLE_S)
        for p in range(self.partitions):
            self.send(p)
            self._flush()

    def _flush(self) -> None:
        while self._producer.flush(10) > 0:
            log("producer: waiting for delivery reports")


# --- the driver ---------------------------------------------------------------------------------


class Driver:
    """The streaming driver process; each (re)start is a new run with a log of its own."""

    def __init__(self, bootstrap: str, topic: str, work: Path) -> None:
        self.args = [bootstrap, topic, str(work / "checkpoint"), str(work / "sink.db")]
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
                start_new_session=True,  # so a kill takes the JVM and Python workers too
            )

    def died(self) -> int | None:
        """The exit code if the driver ended by itself, else None."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        try:
            code = self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything the driver left behind
        return code

    def log_tail(self, lines: int = 15) -> str:
        path = self.work / f"driver-{self.runs}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


# --- the sink -----------------------------------------------------------------------------------


@contextlib.contextmanager
def sink(work: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(work / "sink.db", timeout=30)
    try:
        yield conn
    finally:
        conn.close()


def first_progress_after(work: Path, since: float) -> float | None:
    """When the first micro-batch after ``since`` (wall time) added records, or None."""
    if not (work / "sink.db").exists():
        return None
    with contextlib.suppress(sqlite3.OperationalError), sink(work) as conn:
        row = conn.execute("SELECT min(at) FROM batches WHERE at > ? AND added > 0", (since,))
        found = row.fetchone()[0]
        return None if found is None else float(found)
    return None


def stored_keys(work: Path) -> set[tuple[int, int]]:
    with contextlib.suppress(sqlite3.OperationalError), sink(work) as conn:
        return set(conn.execute("SELECT partition, offset FROM records"))
    return set()


# --- faults -------------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    ended_at: float  # wall time: the kill, the resume, the restart
    recovered_s: float | None = None


@dataclass
class Soak:
    args: argparse.Namespace
    work: Path
    broker: DurableBroker
    driver: Driver
    rng: random.Random
    faults: list[Fault] = field(default_factory=list)
    query_failures: list[str] = field(default_factory=list)

    def babysit(self) -> None:
        """A driver that ended by itself (its query failed) is a failure; start a new one."""
        code = self.driver.died()
        if code is not None:
            tail = self.driver.log_tail()
            self.query_failures.append(f"run {self.driver.runs} exited {code}:\n{tail}")
            log(f"driver run {self.driver.runs} died by itself (exit {code}); restarting")
            self.driver.start()

    def inject(self, kind: str) -> Fault:
        if kind == "kill":
            self.driver.kill()
            fault = Fault(kind, time.time())
            self.driver.start()
        elif kind == "pause":
            self.broker.pause()
            time.sleep(self.rng.uniform(2, 8))
            self.broker.resume()
            fault = Fault(kind, time.time())
        else:
            self.broker.crash()
            time.sleep(self.rng.uniform(1, 4))
            self.broker.restart()
            fault = Fault(kind, time.time())
        self.faults.append(fault)
        return fault

    def wait_for_recovery(self, fault: Fault) -> None:
        deadline = time.monotonic() + self.args.recovery_timeout
        while time.monotonic() < deadline:
            self.babysit()
            at = first_progress_after(self.work, fault.ended_at)
            if at is not None:
                fault.recovered_s = at - fault.ended_at
                return
            time.sleep(0.2)
        what = KINDS.get(fault.kind, fault.kind)
        log(f"no progress within {self.args.recovery_timeout:g} s of the {what}")

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.babysit()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def run(args: argparse.Namespace, work: Path) -> int:
    rng = random.Random(args.seed)
    schedule = ["kill"] * args.kills + ["pause"] * args.pauses + ["crash"] * args.crashes
    rng.shuffle(schedule)
    mean_gap = args.seconds / max(1, len(schedule))
    started = time.monotonic()
    with DurableBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"soak-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=args.partitions)
        producer = SoakProducer(bootstrap, topic, args.partitions, args.rate)
        driver = Driver(bootstrap, topic, work)
        soak = Soak(args, work, broker, driver, rng)
        producer.start()
        driver.start()
        try:
            log(f"{len(schedule)} faults, {args.rate:g} records/s, work dir {work}")
            soak.wait_for_recovery(Fault("start", time.time() - 1))  # the first batch
            for n, kind in enumerate(schedule, 1):
                soak.wait(rng.uniform(0.3, 1.7) * mean_gap)
                fault = soak.inject(kind)
                soak.wait_for_recovery(fault)
                shown = "not" if fault.recovered_s is None else f"in {fault.recovered_s:.1f} s"
                log(f"fault {n}/{len(schedule)}: {KINDS[kind]}; recovered {shown}")
            producer.finish()
            acked = dict(producer.acked)
            log(f"catching up on {len(acked)} acknowledged records")
            deadline = time.monotonic() + args.catch_up
            caught_up = False
            while time.monotonic() < deadline:
                soak.babysit()
                if set(acked) <= stored_keys(work):
                    caught_up = True
                    break
                time.sleep(0.5)
            soak.wait(3.0)  # a duplicate or a stray batch would land now
        finally:
            code = driver.stop()
        if code not in (0, None):
            soak.query_failures.append(f"final run exited {code}:\n{driver.log_tail()}")
    return report(soak, producer, acked, caught_up, time.monotonic() - started)


def report(
    soak: Soak,
    producer: SoakProducer,
    acked: dict[tuple[int, int], bytes],
    caught_up: bool,
    elapsed_s: float,
) -> int:
    with sink(soak.work) as conn:
        stored = {
            (p, o): v for p, o, v in conn.execute("SELECT partition, offset, value FROM records")
        }
        deliveries = conn.execute("SELECT count(*) FROM deliveries").fetchone()[0]
        overlaps = conn.execute(
            "SELECT count(*) FROM (SELECT partition, offset FROM deliveries "
            "GROUP BY partition, offset HAVING count(DISTINCT batch) > 1)"
        ).fetchone()[0]
    missing = sum(1 for key, value in acked.items() if stored.get(key) != value)
    # A record not read yet is only lost if the stream had all the time it needed: until it
    # caught up, "not read" is all the table can honestly say.
    lost_label = "lost" if caught_up else "not read (the stream did not catch up)"
    unacked = len(set(stored) - set(acked))
    faults = [f for f in soak.faults if f.kind in KINDS]

    rows: list[tuple[str, str, str, str]] = [("fault", "injected", "recovered", "longest recovery")]
    for kind, label in KINDS.items():
        of_kind = [f for f in faults if f.kind == kind]
        times = [f.recovered_s for f in of_kind if f.recovered_s is not None]
        longest = f"{max(times):.1f} s" if times else "-"
        rows.append((label, str(len(of_kind)), str(len(times)), longest))
    times = [f.recovered_s for f in faults if f.recovered_s is not None]
    all_longest = f"{max(times):.1f} s" if times else "-"
    rows.append(("all faults", str(len(faults)), str(len(times)), all_longest))
    rows += [
        ("records produced (acknowledged)", str(len(acked)), "", ""),
        ("records read (distinct offsets)", str(len(stored)), "", ""),
        (lost_label, str(missing), "", ""),
        ("duplicated (read by two batches)", str(overlaps), "", ""),
        ("raw re-deliveries (replayed batches)", str(deliveries - len(stored)), "", ""),
        ("read, never acknowledged (producer retries)", str(unacked), "", ""),
        ("queries that died by themselves", str(len(soak.query_failures)), "", ""),
        ("caught up at the end", "yes" if caught_up else "NO", "", ""),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    line = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    print(
        f"Soak: {elapsed_s:.0f} s, {producer.partitions} partitions, "
        f"{soak.driver.runs} driver runs, durable Tansu on S3 (moto), local[2] driver"
    )
    print(line)
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        print("| " + " | ".join(cells) + " |")
        if i in (0, len(KINDS) + 1):
            print(line)
    print(line)
    for failure in soak.query_failures:
        print(f"\nA query died by itself: {failure}", file=sys.stderr)
    failed = (
        missing
        or overlaps
        or len(times) < len(faults)
        or soak.query_failures
        or not caught_up
        or producer.failed
    )
    if producer.failed:
        print(f"{producer.failed} records could not be produced", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        return run(args, args.work_dir)
    with tempfile.TemporaryDirectory(prefix="kafka-direct-soak-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
