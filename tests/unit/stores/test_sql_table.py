"""The offset table: found before it is created, never created with ``create_table=False``, and
a database user that may not run DDL works on a table its owner created. SQLite's authorizer
stands in for the missing CREATE right here; real PostgreSQL is in
tests/integration/test_stores.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores import OffsetStoreError, SqlOffsetStore, open_store
from kafka_direct.stores.sql_dialects import DIALECTS

RANGES = [OffsetRange("t", 0, 0, 5)]


def _no_ddl(action: int, *_: Any) -> int:
    ddl = {sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_DROP_TABLE}
    return sqlite3.SQLITE_DENY if action in ddl else sqlite3.SQLITE_OK


def dml_only_store(path: Path, **kwargs: Any) -> SqlOffsetStore:
    """A store whose connections may read and write, but not run DDL (a least-privilege
    database user)."""

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.set_authorizer(_no_ddl)
        return conn

    return SqlOffsetStore(connect, "sqlite", **kwargs)


def test_a_user_without_ddl_rights_works_on_an_existing_table(tmp_path: Path) -> None:
    # Regression (review): the store always ran CREATE TABLE IF NOT EXISTS, which a database
    # refuses without the right to create (PostgreSQL 15+: no CREATE on public), table or not.
    path = tmp_path / "o.db"
    SqlOffsetStore.sqlite(path).save("owner", RANGES)  # the owner created the table
    store = dml_only_store(path)
    store.save("g", [OffsetRange("t", 0, 0, 7)])
    with store.transaction("g", [OffsetRange("t", 0, 7, 9)]):
        pass
    assert store.load("g") == {TopicPartition("t", 0): 9}
    store.close()


@pytest.mark.parametrize("create_table", [True, False])
def test_a_missing_table_without_ddl_rights_is_named_with_its_create_statement(
    tmp_path: Path, create_table: bool
) -> None:
    store = dml_only_store(tmp_path / "o.db", create_table=create_table)
    with pytest.raises(OffsetStoreError) as info:
        store.save("g", RANGES)
    if not create_table:
        message = str(info.value)
        assert "The offset table kafka_offsets does not exist" in message
        assert "create_table=False" in message
        assert DIALECTS["sqlite"].create_table("kafka_offsets") in message
    else:  # the store tried, and says what the database refused
        assert "not authorized" in str(info.value)


def test_create_table_false_never_creates_but_uses_an_existing_table(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    with pytest.raises(OffsetStoreError, match="does not exist"):
        SqlOffsetStore.sqlite(path, create_table=False).load("g")
    check = sqlite3.connect(path)
    assert check.execute("SELECT name FROM sqlite_master").fetchall() == []
    check.close()
    SqlOffsetStore.sqlite(path).save("g", RANGES)
    assert SqlOffsetStore.sqlite(path, create_table=False).load("g") == {TopicPartition("t", 0): 5}


def test_the_table_is_looked_for_in_its_schema(tmp_path: Path) -> None:
    query, params = DIALECTS["sqlite"].table_exists("main.offs")
    assert query.startswith('SELECT 1 FROM "main".sqlite_master') and params == ("offs",)
    assert DIALECTS["postgres"].table_exists("s.offs") == (
        "SELECT to_regclass(%s)",
        ('"s"."offs"',),
    )
    assert DIALECTS["mysql"].table_exists("offs")[1] == (None, "offs")
    store = SqlOffsetStore.sqlite(tmp_path / "o.db", table="main.offs")
    store.save("g", RANGES)
    assert store.load("g") == {TopicPartition("t", 0): 5}


def test_the_url_takes_create_table(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    with pytest.raises(OffsetStoreError, match="create_table=False"):
        open_store(f"sqlite:///{path}?create_table=false").load("g")
    open_store(f"sqlite:///{path}?create_table=true").save("g", RANGES)
    assert open_store(f"sqlite:///{path}?create_table=false").load("g") == {
        TopicPartition("t", 0): 5
    }
    with pytest.raises(ConfigurationError, match="'create_table'"):
        open_store(f"sqlite:///{path}?create_table=maybe")
