"""SqlOffsetStore against real servers: SQLite, PostgreSQL and MariaDB/MySQL.

Every test runs on all three. The servers come from db_helpers (installed and started when
missing; never skipped). Each test has its own offset table and results table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_direct.errors import ConfigurationError, OffsetConflictError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores import OffsetStoreError, SqlOffsetStore, already_applied
from tests.integration.db_helpers import (
    KINDS,
    Backend,
    mysql_params,
    postgres_dsn,
    unique_table,
)

TP0, TP1 = TopicPartition("events", 0), TopicPartition("events", 1)


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = Backend(request.param, tmp_path)
    try:
        yield b
    finally:
        b.close()


# -- load / save -------------------------------------------------------------------------------


def test_load_save_round_trip(backend: Backend) -> None:
    store = backend.store()
    assert store.load("g") == {}
    store.save(
        "g",
        [
            OffsetRange("events", 0, 0, 10),
            OffsetRange("events", 1, 5, 7),
            OffsetRange("Events", 0, 0, 3),  # another topic: names are case-sensitive
            OffsetRange("events", 0, 10, 20),  # the highest until per partition wins
        ],
    )
    assert store.load("g") == {TP0: 20, TP1: 7, TopicPartition("Events", 0): 3}
    assert store.load("g", [TP1, TopicPartition("other", 0)]) == {TP1: 7}
    assert store.load("other-group") == {}
    store.save("g", [OffsetRange("events", 1, 0, 2)])  # save overwrites, like a Kafka commit
    assert store.load("g", [TP1]) == {TP1: 2}
    # A second store on the same table (another process) sees the same offsets.
    assert backend.store(store.table).load("g") == store.load("g")


def test_table_has_the_documented_columns(backend: Backend) -> None:
    store = backend.store()
    store.save("g", [OffsetRange("events", 0, 0, 4)])
    rows = backend.raw(
        f"SELECT group_id, topic, {store.dialect.quote('partition')}, next_offset, updated_at "
        f"FROM {store.table}"
    )
    assert [r[:4] for r in rows] == [("g", "events", 0, 4)]
    assert rows[0][4] is not None


# -- the exactly-once transaction -------------------------------------------------------------


def test_first_batch_inserts_offsets_and_commits_results_together(backend: Backend) -> None:
    store = backend.store()
    with store.transaction("g", [OffsetRange("events", 0, 5, 10)]) as cur:
        backend.write(cur, "a", 1)
    assert store.load("g") == {TP0: 10}
    assert backend.result_rows() == [("a", 1)]
    # The next batch starts where this one ended.
    with store.transaction("g", [OffsetRange("events", 0, 10, 12)]) as cur:
        backend.write(cur, "b", 2)
    assert store.load("g") == {TP0: 12}
    assert backend.result_rows() == [("a", 1), ("b", 2)]


def test_replayed_batch_conflicts_and_applies_nothing(backend: Backend) -> None:
    store = backend.store()
    batch = [OffsetRange("events", 0, 0, 10), OffsetRange("events", 1, 0, 4)]
    with store.transaction("g", batch) as cur:
        backend.write(cur, "first", 1)

    ran = []
    with pytest.raises(OffsetConflictError) as info, store.transaction("g", batch) as cur:
        ran.append(True)
        backend.write(cur, "replay", 1)
    message = str(info.value)
    assert "events-0: stored next offset 10, but this batch starts at offset 0" in message
    assert info.value.group == "g"
    assert not ran, "the body must not run when the offsets do not match"
    assert backend.result_rows() == [("first", 1)]
    assert store.load("g") == {TP0: 10, TP1: 4}
    assert already_applied(store, "g", batch)


def test_one_mismatched_partition_rolls_back_the_others(backend: Backend) -> None:
    store = backend.store()
    store.save("g", [OffsetRange("events", 0, 0, 10), OffsetRange("events", 1, 0, 8)])
    # events-0 matches (10) and would move to 15; events-1 is at 8, not 4.
    batch = [OffsetRange("events", 0, 10, 15), OffsetRange("events", 1, 4, 9)]
    with (
        pytest.raises(OffsetConflictError, match=r"events-1: stored next offset 8.*offset 4"),
        store.transaction("g", batch) as cur,
    ):
        backend.write(cur, "x", 1)
    assert store.load("g") == {TP0: 10, TP1: 8}
    assert backend.result_rows() == []
    assert not already_applied(store, "g", batch)


def test_error_in_the_body_rolls_back_results_and_offsets(backend: Backend) -> None:
    store = backend.store()
    store.save("g", [OffsetRange("events", 0, 0, 10)])
    with (
        pytest.raises(ZeroDivisionError),
        store.transaction("g", [OffsetRange("events", 0, 10, 20)]) as cur,
    ):
        backend.write(cur, "half", 1)
        _ = 1 / 0
    assert store.load("g") == {TP0: 10}
    assert backend.result_rows() == []
    # The store (and its pooled connection) still works.
    with store.transaction("g", [OffsetRange("events", 0, 10, 20)]) as cur:
        backend.write(cur, "whole", 1)
    assert store.load("g") == {TP0: 20}
    assert backend.result_rows() == [("whole", 1)]


def test_empty_range_checks_the_offset_without_moving_it(backend: Backend) -> None:
    store = backend.store()
    with store.transaction("g", [OffsetRange("events", 0, 7, 7)]):
        pass
    assert store.load("g") == {TP0: 7}
    with store.transaction("g", [OffsetRange("events", 0, 7, 7)]):
        pass
    with (
        pytest.raises(OffsetConflictError),
        store.transaction("g", [OffsetRange("events", 0, 3, 3)]),
    ):
        pass
    assert store.load("g") == {TP0: 7}


@pytest.mark.parametrize("stored_before", [False, True], ids=["first-batch", "next-batch"])
def test_concurrent_writers_of_one_batch_exactly_one_wins(
    backend: Backend, stored_before: bool
) -> None:
    store = backend.store()
    if stored_before:
        store.save("g", [OffsetRange("events", 0, 0, 100), OffsetRange("events", 1, 0, 50)])
    start0, start1 = (100, 50) if stored_before else (0, 0)
    batch = [OffsetRange("events", 0, start0, start0 + 10), OffsetRange("events", 1, start1, 60)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def writer(name: str) -> None:
        barrier.wait()
        try:
            with store.transaction("g", batch) as cur:
                backend.write(cur, name, 1)
                time.sleep(0.3)  # hold the transaction open while the other one tries
            outcomes.append("won")
        except OffsetConflictError:
            outcomes.append("conflict")

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(outcomes) == ["conflict", "won"]
    assert len(backend.result_rows()) == 1
    assert store.load("g") == {TP0: start0 + 10, TP1: 60}


def test_a_writer_waiting_on_the_offsets_conflicts_once_the_winner_commits(
    backend: Backend,
) -> None:
    store = backend.store()
    store.save("g", [OffsetRange("events", 0, 0, 10)])
    batch = [OffsetRange("events", 0, 10, 20)]
    inside, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def winner() -> None:
        with store.transaction("g", batch) as cur:
            backend.write(cur, "winner", 1)
            inside.set()
            release.wait(30)

    def loser() -> None:
        try:
            with store.transaction("g", batch) as cur:
                backend.write(cur, "loser", 1)
        except OffsetConflictError as exc:
            errors.append(exc)

    a = threading.Thread(target=winner)
    a.start()
    assert inside.wait(30)
    b = threading.Thread(target=loser)
    b.start()
    time.sleep(0.5)  # the loser is now blocked on the offset rows (or SQLite's write lock)
    assert b.is_alive(), "the second writer must wait for the first"
    release.set()
    a.join(60)
    b.join(60)
    assert len(errors) == 1 and "stored next offset 20" in str(errors[0])
    assert backend.result_rows() == [("winner", 1)]
    assert store.load("g") == {TP0: 20}


# -- configuration and secrets ------------------------------------------------------------------


def test_repr_and_errors_never_show_the_password(backend: Backend) -> None:
    secret = "s3cr3t-Pa55"
    if backend.kind == "postgres":
        # Port 1 refuses connections: the driver's error must not quote the DSN's password.
        store = SqlOffsetStore.postgres(f"postgresql://postgres:{secret}@127.0.0.1:1/test")
        assert "127.0.0.1:1/test" in repr(store)
    elif backend.kind == "mysql":
        params = dict(mysql_params(), password=secret)  # root has no password: access denied
        store = SqlOffsetStore.mysql(**params)
    else:
        store = backend.store()
        assert str(backend.tmp) in repr(store)
    assert secret not in repr(store)
    if backend.kind != "sqlite":
        with pytest.raises(Exception) as info:  # the driver's own error class
            store.load("g")
        assert secret not in str(info.value) and secret not in repr(info.value)
    store.close()


def test_a_closed_store_refuses_work(backend: Backend) -> None:
    store = backend.store()
    store.save("g", [OffsetRange("events", 0, 0, 1)])
    store.close()
    with pytest.raises(ConfigurationError, match="close"):
        store.load("g")


def test_a_dml_only_postgres_role_works_on_a_table_the_owner_created() -> None:
    # Regression (review): the store always ran CREATE TABLE IF NOT EXISTS, which PostgreSQL
    # 15+ refuses to a role without CREATE on the schema (public has none for everyone) even
    # when the table exists, so a least-privilege user could not open the store at all.
    import psycopg

    dsn = postgres_dsn()
    role, table, missing = unique_table("kd_dml"), unique_table("offsets"), unique_table("none")
    owner = SqlOffsetStore.postgres(dsn, table=table)
    owner.save("g", [OffsetRange("events", 0, 0, 3)])  # the owner creates the table
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE ON "{table}" TO "{role}"')
    role_dsn = psycopg.conninfo.make_conninfo(dsn, user=role)
    stores = [SqlOffsetStore.postgres(role_dsn, table=table, create_table=c) for c in (True, False)]
    try:
        for i, store in enumerate(stores):
            assert store.load("g") == {TP0: 3 + 5 * i}
            with store.transaction("g", [OffsetRange("events", 0, 3 + 5 * i, 8 + 5 * i)]):
                pass
        stores[0].save("g2", [OffsetRange("events", 1, 0, 4)])  # the upsert's INSERT
        assert owner.load("g2") == {TP1: 4} and owner.load("g") == {TP0: 13}
        # A missing table: the database's refusal, or (create_table=False) the DDL to run.
        with pytest.raises(OffsetStoreError, match="permission denied for schema public"):
            SqlOffsetStore.postgres(role_dsn, table=missing).load("g")
        with pytest.raises(OffsetStoreError, match=f'CREATE TABLE IF NOT EXISTS "{missing}"'):
            SqlOffsetStore.postgres(role_dsn, table=missing, create_table=False).load("g")
    finally:
        for store in (*stores, owner):
            store.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
