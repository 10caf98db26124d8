"""Repeats and losses after a driver crash, per mode. Runs in the benchmark process, which
SIGKILLs and restarts child drivers (``python benchmarks/receiver.py --child SPEC``), and in
those children (:func:`child_main`).

For each mode, a child driver streams a fresh topic of ``--crash-records`` records into a
SQLite sink (``records`` keyed by topic, partition and offset; ``deliveries`` not keyed). Rates
spread the data over about ten batches, and the batch function takes 0.5 s, so the kill lands
mid-stream: the parent SIGKILLs the child's process group once 40% of the records are in the
sink, starts it again on the same group (and walDir), and lets it finish. Then:

- repeats = deliveries - distinct records (processed twice: at-least-once);
- lost = records - distinct records (never processed).

The direct stream commits with ``commitAsync`` after its function, so a batch cut short by the
kill repeats. The receiver with the WAL repeats the blocks of that batch. Without the WAL, what
the receivers had received and committed but the batches had not processed is lost.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafka_direct_bench.common import BenchmarkError, log
from kafka_direct_bench.dataset import create_topic, new_topic, produce_dataset

ENTRY = Path(__file__).resolve().parents[1] / "receiver.py"
SLOW_S = 0.5


def child_main(spec_path: str) -> None:
    """A child driver: the spec's mode over its topic into its sink, until ``stop`` appears."""
    from kafka_direct.testing.local import local_spark
    from kafka_direct_bench.receiver import ReceiverBenchConfig, make_stream

    spec = json.loads(Path(spec_path).read_text())
    config = ReceiverBenchConfig(**spec["config"])
    work, db = Path(spec["work"]), spec["db"]
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INTEGER, "
            "offset INTEGER, PRIMARY KEY (topic, partition, offset))"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS deliveries (offset INTEGER)")
    spark = local_spark("receiver-bench-crash", cores=config.receivers + 2)
    seconds = 10.0
    stream = make_stream(
        spark, spec["mode"], spec["bootstrap"], spec["topic"], config, work,
        per_partition=config.crash_records / (config.partitions * seconds),
        per_receiver=config.crash_records / (config.receivers * seconds),
    )  # fmt: skip

    def each(df: Any, ranges: Any) -> None:
        rows = [tuple(r) for r in df.select("topic", "partition", "offset").collect()]
        with sqlite3.connect(db) as conn:
            conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", rows)
            conn.executemany("INSERT INTO deliveries VALUES (?)", [(r[2],) for r in rows])
        time.sleep(SLOW_S)
        if spec["mode"] == "direct":
            stream.commitAsync(ranges)

    stream.foreachBatch(each)
    stream.start()
    status = work / "status.json"
    while not (work / "stop").exists():
        (work / "status.part").write_text(json.dumps({"batches": len(stream.batches)}))
        os.replace(work / "status.part", status)  # the parent never reads half a file
        time.sleep(0.2)
    stream.stop()
    spark.stop()


def _counts(db: Path) -> tuple[int, int]:
    """(distinct records, deliveries) in a sink."""
    try:
        with sqlite3.connect(db) as conn:
            distinct = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            delivered = conn.execute("SELECT count(*) FROM deliveries").fetchone()[0]
    except sqlite3.OperationalError:
        return 0, 0
    return int(distinct), int(delivered)


def _start(spec_path: Path, log_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(ENTRY), "--child", str(spec_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # the kill takes the JVM too
        )


def _wait(proc: subprocess.Popen[bytes], done: Any, what: str, log_path: Path) -> None:
    deadline = time.monotonic() + 300
    while not done():
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise BenchmarkError(
                f"crash phase: the child driver exited waiting for {what}:\n{tail}"
            )
        if time.monotonic() > deadline:
            raise BenchmarkError(f"crash phase: timed out waiting for {what}")
        time.sleep(0.1)


def _committed(bootstrap: str, group: str) -> int:
    from kafka_direct.kafka.groups import fetch_group_offsets

    return sum(fetch_group_offsets({"bootstrap.servers": bootstrap}, group).values())


def crash_once(bootstrap: str, config: Any, work: Path, mode: str) -> dict[str, Any]:
    from dataclasses import asdict

    topic = new_topic(f"crash-{mode}")
    create_topic(bootstrap, topic, config.partitions)
    n = config.crash_records
    produce_dataset(bootstrap, topic, n, config.size, config.partitions, config.seed)
    run_dir = work / f"crash-{mode}"
    run_dir.mkdir()
    db, log_path, spec_path = run_dir / "sink.db", run_dir / "driver.log", run_dir / "spec.json"
    spec = {"mode": mode, "bootstrap": bootstrap, "topic": topic, "work": str(run_dir),
            "db": str(db), "config": {**asdict(config), "skip": []}}  # fmt: skip
    spec_path.write_text(json.dumps(spec))
    child = _start(spec_path, log_path)
    try:
        _wait(child, lambda: _counts(db)[0] >= 0.4 * n, "40% of the records", log_path)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    at_kill = _counts(db)
    (run_dir / "status.json").unlink(missing_ok=True)
    child = _start(spec_path, log_path)
    group = f"bench-{mode}-{topic}"
    try:
        if mode == "receiver-nowal":
            # Nothing more comes once the group has committed everything and a few batches
            # of the restarted stream have run.
            def settled() -> bool:
                status = run_dir / "status.json"
                batches = json.loads(status.read_text())["batches"] if status.exists() else 0
                return _committed(bootstrap, group) == n and batches >= 3

            _wait(child, settled, "the restarted stream to settle", log_path)
        else:
            _wait(child, lambda: _counts(db)[0] >= n, "every record", log_path)
        (run_dir / "stop").write_text("stop")
        child.wait(120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(30)
    distinct, delivered = _counts(db)
    return {
        "records": n,
        "processed_at_kill": at_kill[0],
        "distinct": distinct,
        "deliveries": delivered,
        "repeats": delivered - distinct,
        "lost": n - distinct,
    }


def crash_phase(bootstrap: str, config: Any, work: Path) -> dict[str, Any]:
    from kafka_direct_bench.receiver import MODES

    results = {}
    for mode in MODES:
        log(f"crash: {mode}, {config.crash_records:,} records, SIGKILL at 40%, restart")
        results[mode] = crash_once(bootstrap, config, work, mode)
        r = results[mode]
        log(f"  repeats {r['repeats']:,}, lost {r['lost']:,}")
    return results
