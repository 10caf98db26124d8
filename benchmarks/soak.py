"""Soak on a real Kafka cluster: three pipelines keep running through a seeded schedule of
broker, controller, driver and worker faults, and end exact. Runs on demand, and in its
three-minute form in the test suite (tests/integration/faults/test_soak_real_kafka.py)::

    python benchmarks/soak.py --duration 1800 --seed 1     # 30 minutes of faults
    python benchmarks/soak.py --duration 180               # the suite's form
    python benchmarks/soak.py --tansu [options]            # the older soak on durable Tansu

What runs (the soak's own process owns the brokers, the producer and the faults):

- ``KafkaCluster(brokers=--brokers)``: real Apache Kafka, KRaft; with 3 brokers every topic has
  replication factor 3 and ``min.insync.replicas=2``;
- a producer thread: numbered records to every partition of the source topic at ``--rate``
  records/s, idempotent, ``acks=all``; a record counts when its delivery report gives its offset;
- ``benchmarks/soak_driver.py``, a Spark driver in a process of its own, with three pipelines
  side by side: a stream into the exactly-once sink, one into the at-least-once sink, and a
  DStream with an SQLite offset store (benchmarks/soak_faults.py and soak_driver.py say more);
- the faults, in rounds: each round runs the five kinds once, in a seeded order (``--seed``), a
  few seconds apart, each once every pipeline has recovered from the one before. The first
  round always runs whole; after it, no fault starts once ``--duration`` seconds have passed
  (a round is not finished past it: one takes minutes).

Then the producer stops, the pipelines catch up, and each output is read back under
``read_committed``: the exactly-once topic must hold every acknowledged record once; the
at-least-once topic must lose none (its duplicates are counted and printed); the DStream's
output must hold every record once and its store's offsets must equal what it processed.

A recovery is timed from the end of a fault (the restart, the resume, the kill) to each
pipeline's first micro-batch that read records; a fault's recovery is the slowest pipeline's.
The exit status is 1 if a record was lost, the exactly-once or DStream output holds a duplicate,
a fault was not recovered from, a pipeline died by itself, or the pipelines did not catch up.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # soak_check, soak_faults, soak_driver

from soak_check import (
    SequencedProducer,
    caught_up,
    check_dstream,
    check_values,
    expected_copies,
    first_progress_after,
    read_committed,
    read_log,
)
from soak_faults import KINDS, Driver, Fault, Injector, SoakError
from soak_report import report

from kafka_direct.testing.kafka_cluster import KafkaCluster
from kafka_direct.testing.topics import create_topic


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--brokers", type=int, default=3, help="Kafka brokers (default 3)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--rate", type=float, default=40.0, help="records/s produced in all (default 40)"
    )
    parser.add_argument("--recovery-timeout", type=float, default=420.0)
    parser.add_argument("--catch-up", type=float, default=600.0)
    parser.add_argument("--work-dir", type=Path, default=None, help="keep logs and outputs here")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    # Taken by main() before these options are parsed: the rest go to soak_tansu's own parser.
    parser.add_argument(
        "--tansu", action="store_true", help="run the older soak on durable Tansu instead"
    )
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def create_topics(bootstrap: str, names: list[str], partitions: int, brokers: int) -> None:
    # create_topic returns once every partition's leader serves the topic (testing/topics.py).
    config = {"min.insync.replicas": str(min(2, brokers))}
    for name in names:
        create_topic(bootstrap, name, partitions, config, 120, replication_factor=min(3, brokers))


#: How long a (re)started broker may take to serve (see run()).
RESTART_TIMEOUT_S = 420.0


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.rng = random.Random(args.seed)
        self.faults: list[Fault] = []
        self.deaths: list[str] = []
        self.driver: Driver

    def babysit(self) -> None:
        """A driver that ended by itself (a pipeline failed) is a failure; start a new one."""
        code = self.driver.died()
        if code is not None:
            self.deaths.append(f"run {self.driver.runs} exited {code}:\n{self.driver.log_tail()}")
            log(f"driver run {self.driver.runs} died by itself (exit {code}); restarting")
            self.driver.start()

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.babysit()
            time.sleep(0.2)

    def recover(self, since: float) -> dict[str, float | None]:
        deadline = time.monotonic() + self.args.recovery_timeout
        while True:
            self.babysit()
            found = first_progress_after(self.work, since)
            if all(v is not None for v in found.values()) or time.monotonic() > deadline:
                return found
            time.sleep(0.5)

    def kinds(self) -> list[str]:
        if self.args.brokers < 3:  # one broker down would stop the cluster, not test it
            return ["kill-driver", "kill-worker"]
        return list(KINDS)

    def more(self, started: float) -> bool:
        """Whether another fault starts: until every kind has run once and the duration has
        passed."""
        ran = {f.kind for f in self.faults}
        return not (ran >= set(self.kinds()) and time.monotonic() - started >= self.args.duration)

    def schedule(self) -> list[str]:
        """The next round of faults: every kind once, in a seeded order."""
        kinds = self.kinds()
        self.rng.shuffle(kinds)
        return kinds

    def run(self) -> dict[str, Any]:
        args = self.args
        started = time.monotonic()
        # A killed broker restarts while three pipelines, their Spark and the other brokers run
        # on the same cores: on a loaded 2-core machine the restarted active controller took
        # just over KafkaCluster's 180 s to be unfenced once (a suite run, 2026-11-29). The
        # soak checks what the pipelines deliver, not how fast a broker restarts; the hang
        # guard is the caller's.
        with KafkaCluster(brokers=args.brokers, startup_timeout_s=RESTART_TIMEOUT_S) as cluster:
            bootstrap = cluster.bootstrap_servers
            topic = f"soak-{int(time.time())}"
            create_topics(
                bootstrap, [topic, f"{topic}-eos", f"{topic}-alo"], args.partitions, args.brokers
            )
            log(f"cluster of {args.brokers} up in {time.monotonic() - started:.0f} s; {topic}")
            producer = SequencedProducer(bootstrap, topic, args.partitions, args.rate)
            self.driver = Driver(bootstrap, topic, self.work)
            injector = Injector(cluster, topic, self.driver)
            producer.start()
            self.driver.start()
            try:
                first = self.recover(time.time() - 1)
                log(f"every pipeline running: {first}")
                started = time.monotonic()
                while self.more(started):
                    for kind in self.schedule():
                        if not self.more(started):
                            break
                        self.wait(self.rng.uniform(3, 12))
                        try:
                            detail, ended = injector.inject(kind)
                        except SoakError as exc:
                            injector.heal()
                            detail, ended = f"NOT INJECTED: {exc}", time.time()
                        fault = Fault(kind, detail, ended, self.recover(ended))
                        self.faults.append(fault)
                        log(
                            f"fault {len(self.faults)}: {KINDS[kind]}, {detail}; "
                            f"recovered {fault.recovered_s}"
                        )
                faulted_s = time.monotonic() - started
                acked = producer.finish()
                ends = producer.ends()
                log(f"catching up on {len(acked)} acknowledged records, ends {ends}")
                deadline = time.monotonic() + args.catch_up
                done = caught_up(self.work, ends)
                while not all(done.values()) and time.monotonic() < deadline:
                    self.wait(1.0)
                    done = caught_up(self.work, ends)
                self.wait(3.0)  # a duplicate or a stray batch would land now
            finally:
                code = self.driver.stop()
            if code not in (0, None):
                self.deaths.append(f"final run exited {code}:\n{self.driver.log_tail()}")
            held = read_log(bootstrap, topic, args.partitions, len(acked))
            expected = expected_copies(acked, held)
            twice = sum(n - 1 for n in expected.values())
            if twice:
                log(f"the source topic holds {twice} record(s) twice: the sinks owe each copy")
            checks = [
                check_values(
                    pipe,
                    expected,
                    read_committed(
                        bootstrap, f"{topic}-{pipe}", args.partitions, sum(expected.values())
                    ),
                )
                for pipe in ("eos", "alo")
            ]
            # Delivery reports are librdkafka's claim, not the log: in one run after leader
            # kills, four named another offset than the one the log holds the record at.
            claimed = sum(1 for v, at in acked.items() if at[1] >= 0 and held.get(at) != v)
            if claimed:
                log(f"{claimed} delivery report(s) named another offset than the log's")
            checks.append(check_dstream(self.work, topic, acked, args.partitions, held))
        return {
            "seconds": time.monotonic() - started,
            "faulted_s": faulted_s,
            "produced": len(acked),
            "producer_failures": producer.failures[:5],
            "caught_up": done,
            "driver_runs": self.driver.runs,
            "deaths": self.deaths,
            "faults": [vars(f) for f in self.faults],
            "checks": {c.name: vars(c) for c in checks},
            "kafka": cluster.kafka_version,
            "brokers": args.brokers,
            "seed": args.seed,
        }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--tansu" in argv:
        import soak_tansu

        return soak_tansu.main([a for a in argv if a != "--tansu"])
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1_000_000)
    log(f"seed {args.seed}")
    if args.work_dir is not None:
        if args.work_dir.exists() and any(args.work_dir.iterdir()):
            # An earlier run's checkpoints name another run's topics: the pipelines would
            # restart on them and fail at once with a data loss.
            raise SystemExit(
                f"--work-dir {args.work_dir}: not empty (an earlier run's checkpoints and "
                "logs?); give a new or an empty directory"
            )
        args.work_dir.mkdir(parents=True, exist_ok=True)
        results = Soak(args, args.work_dir).run()
    else:
        with tempfile.TemporaryDirectory(prefix="kafka-direct-soak-") as tmp:
            results = Soak(args, Path(tmp)).run()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
