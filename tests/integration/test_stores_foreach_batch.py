"""exactly_once_foreach_batch with a real local Spark, on SQLite, PostgreSQL and MariaDB.

Batches are built as DataFrames with the source's columns, so each case (a replay, a partial
overlap, a gap from a transaction marker, a race) is set up exactly. The full streaming path,
with SIGKILLs, is test_stores_wordcount_crash.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError, OffsetConflictError
from kafka_direct.offsets import TopicPartition
from kafka_direct.stores import KafkaGroupStore, SqlOffsetStore, exactly_once_foreach_batch
from tests.integration.db_helpers import KINDS, Backend

SCHEMA = "topic string, partition int, offset long, value string"
TP0, TP1 = TopicPartition("events", 0), TopicPartition("events", 1)


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path)
    try:
        yield b
    finally:
        b.close()


def batch(spark: Any, *parts: tuple[int, list[int]]) -> Any:
    """A batch DataFrame: for each (partition, offsets), records with value 'p{partition}o{off}'."""
    rows = [("events", p, o, f"p{p}o{o}") for p, offsets in parts for o in offsets]
    return spark.createDataFrame(rows, SCHEMA)


class Recorder:
    """The user's function: records what it saw, writes one result row per record."""

    def __init__(self, backend: Backend, *, hold: threading.Event | None = None) -> None:
        self.backend = backend
        self.seen: list[list[str]] = []
        self.hold = hold
        self.inside = threading.Event()

    def __call__(self, df: Any, batch_id: int, cur: Any) -> None:
        values = sorted(r["value"] for r in df.select("value").collect())
        self.seen.append(values)
        for v in values:
            self.backend.write(cur, v, batch_id)
        self.inside.set()
        if self.hold is not None:
            self.hold.wait(60)


def values(backend: Backend) -> list[str]:
    return [k for k, _ in backend.result_rows()]


def test_batches_apply_once_and_replays_are_skipped(
    spark: Any, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.store()
    fn = Recorder(backend)
    run = exactly_once_foreach_batch(store, "g", fn)

    first = batch(spark, (0, [0, 1, 2]), (1, [0, 1]))
    run(first, 0)
    assert store.load("g") == {TP0: 3, TP1: 2}
    assert fn.seen == [["p0o0", "p0o1", "p0o2", "p1o0", "p1o1"]]

    # Spark replays batch 0 after a crash between our commit and its checkpoint: skipped.
    with caplog.at_level(logging.INFO, logger="kafka_direct.stores"):
        run(first, 0)
    assert len(fn.seen) == 1
    assert "Skipping batch 0" in caplog.text
    assert store.load("g") == {TP0: 3, TP1: 2}

    # Offset 3 of partition 0 is a transaction marker: the next batch starts at 4. Partition 1
    # has nothing new in this batch, so its offset stays.
    run(batch(spark, (0, [4, 5])), 1)
    assert store.load("g") == {TP0: 6, TP1: 2}
    assert fn.seen[1] == ["p0o4", "p0o5"]

    # An empty batch calls nothing.
    run(spark.createDataFrame([], SCHEMA), 2)
    assert len(fn.seen) == 2
    assert sorted(values(backend)) == ["p0o0", "p0o1", "p0o2", "p0o4", "p0o5", "p1o0", "p1o1"]


def test_a_batch_overlapping_applied_offsets_passes_on_only_the_new_records(
    spark: Any, backend: Backend
) -> None:
    store = backend.store()
    fn = Recorder(backend)
    run = exactly_once_foreach_batch(store, "g", fn)
    run(batch(spark, (0, [0, 1, 2]), (1, [0])), 0)
    # A restart from an older checkpoint with other batch boundaries: partition 0 overlaps
    # (0..4 against stored 3), partition 1 is entirely applied (0 against stored 1).
    run(batch(spark, (0, [0, 1, 2, 3, 4]), (1, [0])), 7)
    assert fn.seen[1] == ["p0o3", "p0o4"]
    assert store.load("g") == {TP0: 5, TP1: 1}
    assert sorted(values(backend)) == ["p0o0", "p0o1", "p0o2", "p0o3", "p0o4", "p1o0"]


def test_on_replay_error_raises_instead_of_skipping(spark: Any, backend: Backend) -> None:
    store = backend.store()
    fn = Recorder(backend)
    run = exactly_once_foreach_batch(store, "g", fn, on_replay="error", persist=False)
    first = batch(spark, (0, [0, 1]))
    run(first, 0)
    with pytest.raises(OffsetConflictError, match="batch 0 was already applied"):
        run(first, 0)
    assert len(fn.seen) == 1
    assert store.load("g") == {TP0: 2}


def test_a_failing_function_rolls_back_results_and_offsets(spark: Any, backend: Backend) -> None:
    store = backend.store()

    def failing(df: Any, batch_id: int, cur: Any) -> None:
        backend.write(cur, "partial", batch_id)
        raise RuntimeError("user code failed")

    with pytest.raises(RuntimeError, match="user code failed"):
        exactly_once_foreach_batch(store, "g", failing)(batch(spark, (0, [0, 1])), 0)
    assert store.load("g") == {}
    assert backend.result_rows() == []
    # Spark retries the batch (or the query restarts): it applies normally.
    fn = Recorder(backend)
    exactly_once_foreach_batch(store, "g", fn)(batch(spark, (0, [0, 1])), 0)
    assert store.load("g") == {TP0: 2}
    assert values(backend) == ["p0o0", "p0o1"]


def test_a_concurrent_writer_never_double_applies(spark: Any, backend: Backend) -> None:
    store = backend.store()
    store.save("g", [])  # nothing stored: both writers race for the first insert
    hold = threading.Event()
    winner_fn = Recorder(backend, hold=hold)
    loser_fn = Recorder(backend)
    the_batch = batch(spark, (0, [0, 1, 2]))
    outcome: list[str] = []

    def winner() -> None:
        exactly_once_foreach_batch(store, "g", winner_fn)(the_batch, 0)

    def loser() -> None:
        try:
            exactly_once_foreach_batch(store, "g", loser_fn)(the_batch, 0)
            outcome.append("skipped" if not loser_fn.seen else "applied")
        except OffsetConflictError:
            outcome.append("conflict")

    a = threading.Thread(target=winner)
    a.start()
    assert winner_fn.inside.wait(60)
    b = threading.Thread(target=loser)
    b.start()
    # The loser reads the (still empty) store, then waits on the offset row: release the winner
    # only once the server shows that wait (on SQLite, the loser waits at BEGIN instead).
    _wait_for_a_blocked_writer(backend, b)
    hold.set()
    a.join(60)
    b.join(60)
    # The loser raced (conflict) or arrived after the commit (skip): never a second apply.
    # On PostgreSQL and MariaDB it read the store before the winner committed, so it must
    # conflict; SQLite serializes writers at BEGIN, so there it sees the commit and skips.
    expected = "skipped" if backend.kind == "sqlite" else "conflict"
    assert outcome == [expected]
    assert loser_fn.seen == []
    assert values(backend) == ["p0o0", "p0o1", "p0o2"]
    assert store.load("g") == {TP0: 3}


_LOCK_WAITS = {
    "postgres": "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
    "AND datname = current_database()",
    "mysql": "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'",
}


def _wait_for_a_blocked_writer(backend: Backend, thread: threading.Thread) -> None:
    if backend.kind not in _LOCK_WAITS:
        time.sleep(1.0)
        return
    deadline = time.monotonic() + 60
    while int(backend.raw(_LOCK_WAITS[backend.kind])[0][0]) == 0:
        assert thread.is_alive(), "the second writer finished without waiting on the first"
        assert time.monotonic() < deadline, "the second writer never waited on the offset row"
        time.sleep(0.05)


def test_refuses_a_store_without_transactions_and_a_dataframe_without_offsets(
    spark: Any, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="SqlOffsetStore"):
        exactly_once_foreach_batch(
            KafkaGroupStore({"bootstrap.servers": "127.0.0.1:1"}),  # type: ignore[arg-type]
            "g",
            lambda df, i, cur: None,
        )
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    run = exactly_once_foreach_batch(store, "g", lambda df, i, cur: None)
    projected = batch(spark, (0, [0])).select("value")
    with pytest.raises(ConfigurationError, match="'topic', 'partition' and 'offset'"):
        run(projected, 0)
    store.close()
