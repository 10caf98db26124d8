"""The hard test of issue 3: a word count whose counts live in PostgreSQL, its driver SIGKILLed
three times mid-stream and restarted each time from the offset store (with a fresh checkpoint).
Every word's count must equal exactly what was produced: nothing lost, nothing counted twice.

Two of the kills land inside an open transaction (the batch's counts written, not committed),
one just after a commit (the offsets stored, Spark's own bookkeeping of the batch unfinished).
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer

from kafka_direct.offsets import TopicPartition
from kafka_direct.stores import SqlOffsetStore
from tests.integration.db_helpers import drop_table, postgres_dsn
from tests.integration.kafka_helpers import tansu_log_end_workaround

DRIVER = Path(__file__).with_name("wordcount_db_driver.py")
VOCABULARY = [f"w{i:02d}" for i in range(40)]
PARTITIONS, LINES_PER_PARTITION = 2, 400


def produce_lines(bootstrap: str, topic: str) -> Counter[str]:
    """Lines of 1..8 words to each partition; returns how often each word was produced."""
    rng = random.Random(3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    expected: Counter[str] = Counter()
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    def send(p: int) -> None:
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 8))]
        expected.update(words)
        producer.produce(topic, " ".join(words).encode(), partition=p, on_delivery=on_delivery)

    alone = tansu_log_end_workaround()
    for p in range(PARTITIONS):
        for _ in range(LINES_PER_PARTITION - (1 if alone else 0)):
            send(p)
    producer.flush(30)
    # Tansu reports the log end as the start of the last record batch (docs/brokers.md): there,
    # each partition's last record goes alone, so the end is exact.
    for p in range(PARTITIONS if alone else 0):
        send(p)
        producer.flush(30)
    assert not errors, errors
    return expected


class Run:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self.log_start = log.stat().st_size if log.exists() else 0
        # The driver's fresh checkpoints (tempfile.mkdtemp) land in the test's own directory.
        tmp = log.parent / "tmp"
        tmp.mkdir(exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp))
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: the kill takes the JVM too
            )

    def lines(self, marker: str) -> int:
        """How many log lines of this run contain ``marker``."""
        with open(self.log, "rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace").count(marker)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def wait_for(value: Callable[[], int], at_least: int, run: Run, timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = value()
        if seen >= at_least:
            return seen
        if run.proc.poll() is not None:
            pytest.fail(f"driver exited ({run.proc.returncode}); log:\n{_tail(run.log)}")
        time.sleep(0.05)
    pytest.fail(f"timed out at {value()} < {at_least}; log:\n{_tail(run.log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


@pytest.mark.slow
def test_word_counts_in_postgres_survive_repeated_sigkills_exactly(
    make_topic: Callable[..., str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    dsn = postgres_dsn()
    topic = make_topic(partitions=PARTITIONS, prefix="words")
    expected = produce_lines(kafka_bootstrap, topic)
    total = PARTITIONS * LINES_PER_PARTITION
    suffix = uuid.uuid4().hex[:8]
    group, counts, offsets = f"wc-{suffix}", f"counts_{suffix}", f"offsets_{suffix}"
    args = [kafka_bootstrap, topic, dsn, group, counts, offsets]
    log = tmp_path / "driver.log"
    store = SqlOffsetStore.postgres(dsn, table=offsets)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def progress() -> int:
        # Offsets start at 0 and nothing is transactional, so stored offsets count records.
        return sum(store.load(group, tps).values())

    try:
        kills_at = []
        for kill_in_transaction in (True, False, True):
            run = Run([*args, "1" if kill_in_transaction else "-1"], log)
            try:
                if kill_in_transaction:
                    # Batch 1 of this run has written its counts and holds its transaction.
                    wait_for(functools.partial(run.lines, "holding the transaction"), 1, run)
                    before = progress()
                else:
                    wait_for(progress, total // 2, run)
            finally:
                run.kill()
            kills_at.append(progress())
            assert kills_at[-1] < total, "the kill should land before the stream is done"
            if kill_in_transaction:
                # The killed transaction committed nothing (PostgreSQL rolled it back).
                assert kills_at[-1] == before

        run = Run([*args, "-1"], log)
        try:
            wait_for(progress, total, run)
            time.sleep(2)  # a stray or duplicate batch would land now
        finally:
            run.kill()

        with psycopg.connect(dsn) as conn:
            rows = conn.execute(f'SELECT word, n FROM "{counts}"').fetchall()
        counted = {word: int(n) for word, n in rows}
        assert counted == dict(expected)
        assert store.load(group) == {tp: LINES_PER_PARTITION for tp in tps}
        assert len(kills_at) == 3 and kills_at == sorted(kills_at)
        # Each restart resumed from the store, not from the beginning.
        assert log.read_text().count("Resuming group") == 4
    finally:
        store.close()
        drop_table("postgres", counts)
        drop_table("postgres", offsets)
