"""A SQL offset store that cannot be opened raises OffsetStoreError (a KafkaDirectError) naming
the store without its password, with the driver's error as its cause; the CLI shows it in one
line. No database server: SQLite files, and the drivers' connect() replaced by fakes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from kafka_direct.cli import main
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.offsets import OffsetRange
from kafka_direct.stores import OffsetStoreError, SqlOffsetStore, open_store
from kafka_direct.stores.sql_dialects import is_database_error

RANGES = [OffsetRange("t", 0, 0, 5)]


def test_a_sqlite_path_that_is_a_directory_cannot_be_connected_to(tmp_path: Path) -> None:
    store = SqlOffsetStore.sqlite(tmp_path)
    with pytest.raises(OffsetStoreError) as info:
        store.load("g")
    assert isinstance(info.value, KafkaDirectError)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert str(info.value) == (
        f"Could not connect to the offset store SqlOffsetStore(sqlite, {tmp_path}, "
        "table=kafka_offsets): unable to open database file (OperationalError). Check that the "
        "path names a database file (or a new one) in a directory that exists and that this "
        "process may write."
    )


def test_a_file_that_is_not_a_database_fails_where_the_table_is_created(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database, but long enough to have a header " * 4)
    expected = r"Could not find or create the offset table in the offset store .*: file is not "
    with pytest.raises(OffsetStoreError, match=expected + r"a database \(DatabaseError\)"):
        SqlOffsetStore.sqlite(path).save("g", RANGES)


def test_a_transaction_on_a_store_that_cannot_be_opened_raises_before_its_body(
    tmp_path: Path,
) -> None:
    # What a direct stream's store.transaction (and foreachBatch) meets: one error, nothing run.
    ran = []
    with pytest.raises(OffsetStoreError), SqlOffsetStore.sqlite(tmp_path).transaction("g", RANGES):
        ran.append(True)
    assert ran == []


def test_the_sql_inside_a_transaction_keeps_the_drivers_errors(tmp_path: Path) -> None:
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    with (
        pytest.raises(sqlite3.OperationalError, match="no such table: counts"),
        store.transaction("g", RANGES) as cur,
    ):
        cur.execute("INSERT INTO counts VALUES (1)")
    assert store.load("g") == {}  # rolled back with the offsets


def test_a_write_lock_held_past_the_busy_timeout_is_named(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    SqlOffsetStore.sqlite(path).save("g", RANGES)  # creates the table
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OffsetStoreError) as info:
            SqlOffsetStore.sqlite(path, timeout_s=0.05).save("g", RANGES)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(info.value) == (
        f"Could not start a transaction in the offset store SqlOffsetStore(sqlite, {path}, "
        "table=kafka_offsets): database is locked (OperationalError)."
    )


def test_an_unreachable_postgres_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(*args: Any, **kw: Any) -> Any:
        # libpq does not quote the password; the store scrubs it anyway, should a driver do so.
        raise psycopg.OperationalError(
            'connection failed: connection to server at "10.0.0.9", port 6543 failed: '
            "Connection refused\n\tIs the server running? (dsn password=hunter2)"
        )

    monkeypatch.setattr(psycopg, "connect", refused)
    store = SqlOffsetStore.postgres("postgresql://app:hunter2@10.0.0.9:6543/prod")
    with pytest.raises(OffsetStoreError) as info:
        store.load("g")
    message = str(info.value)
    assert "hunter2" not in message
    assert message.startswith(
        "Could not connect to the offset store SqlOffsetStore(postgres, "
        "postgresql://app@10.0.0.9:6543/prod, table=kafka_offsets): connection failed: "
        'connection to server at "10.0.0.9", port 6543 failed: Connection refused Is the '
        "server running? (dsn password=<redacted>) (OperationalError). Check that the database "
        "server is running"
    )
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


def test_an_unreachable_mysql_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(**kw: Any) -> Any:
        raise pymysql.err.OperationalError(
            2003, "Can't connect to MySQL server on 'db' ([Errno 111] Connection refused)"
        )

    monkeypatch.setattr(pymysql, "connect", refused)
    with pytest.raises(OffsetStoreError) as info:
        open_store("mysql://app:hunter2@db:3307/prod").load("g")
    message = str(info.value)
    assert "hunter2" not in message
    assert message.startswith(
        "Could not connect to the offset store SqlOffsetStore(mysql, app@db:3307/prod, "
        "table=kafka_offsets): (2003, \"Can't connect to MySQL server on 'db' ([Errno 111] "
        'Connection refused)") (OperationalError).'
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql://app:hunter2@db:99999/prod", "Port out of range 0-65535"),
        ("mysql://app:hunter2@db:abc/prod", "Port could not be cast to integer value as 'abc'"),
        ("mysql://app:hunter2@db:0/prod", "0 is no port"),
    ],
)
def test_a_mysql_url_with_a_bad_port_is_a_configuration_error(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_store(url)
    shown = url.replace("app:hunter2@", "")
    assert str(info.value) == (
        f"Invalid option '--store': got '{shown}', expected a port from 1 to 65535 after the "
        f"host. Fix the port ({problem}), or leave it out for the database's default."
    )


@pytest.mark.parametrize(
    ("error", "is_db"),
    [
        (sqlite3.OperationalError("unable to open database file"), True),
        (sqlite3.DatabaseError("file is not a database"), True),
        (sqlite3.InterfaceError("bad parameter"), True),
        (psycopg.OperationalError("connection failed"), True),
        (pymysql.err.OperationalError(2003, "Can't connect"), True),
        (pymysql.err.InterfaceError("closed"), True),
        (ValueError("Port out of range"), False),
        (OSError("disk full"), False),
    ],
)
def test_database_errors_are_recognised_by_their_dbapi_class(
    error: BaseException, is_db: bool
) -> None:
    assert is_database_error(error) is is_db


def test_offsets_show_on_a_store_that_cannot_be_opened_is_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue: 'offsets show --store sqlite:///tmp' ended in a sqlite3.OperationalError traceback.
    assert main(["offsets", "show", "--store", f"sqlite://{tmp_path}", "--group", "g"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"kafka-direct: OffsetStoreError: Could not connect to the offset store "
        f"SqlOffsetStore(sqlite, {tmp_path}, table=kafka_offsets): unable to open database file"
    )
    assert err.count("\n") == 1


def test_offsets_show_with_a_port_out_of_range_is_one_line_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue: 'mysql://...:99999/db' ended in a ValueError traceback.
    code = main(["offsets", "show", "--store", "mysql://app:hunter2@db:99999/prod", "--group", "g"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("kafka-direct: ConfigurationError: Invalid option '--store'")
    assert "hunter2" not in err
