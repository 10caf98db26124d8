"""Real database servers for the offset-store tests: PostgreSQL and MariaDB/MySQL.

The project's machines run both (PostgreSQL on 127.0.0.1:5432 with trust auth, MariaDB on
127.0.0.1:3306 as root without a password, each with a database `test`). Environment variables
point the tests elsewhere:

    KAFKA_DIRECT_PG_DSN          postgresql://postgres@127.0.0.1:5432/test
    KAFKA_DIRECT_MYSQL_HOST      127.0.0.1
    KAFKA_DIRECT_MYSQL_PORT      3306
    KAFKA_DIRECT_MYSQL_USER      root
    KAFKA_DIRECT_MYSQL_PASSWORD  (empty)
    KAFKA_DIRECT_MYSQL_DATABASE  test

`scripts/services.sh` (run by scripts/test.sh) installs both from Debian's packages when absent,
starts them and creates the database and the TCP root login. This module only checks and
connects: when a server does not answer, the test fails and says so; nothing is ever skipped.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.stores import SqlOffsetStore

PG_DSN = os.environ.get("KAFKA_DIRECT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL: dict[str, Any] = {
    "host": os.environ.get("KAFKA_DIRECT_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("KAFKA_DIRECT_MYSQL_PORT", "3306")),
    "user": os.environ.get("KAFKA_DIRECT_MYSQL_USER", "root"),
    "password": os.environ.get("KAFKA_DIRECT_MYSQL_PASSWORD", ""),
    "database": os.environ.get("KAFKA_DIRECT_MYSQL_DATABASE", "test"),
}
KINDS = ["sqlite", "postgres", "mysql"]


def unique_table(prefix: str = "offsets") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# -- probing ---------------------------------------------------------------------------------


def _pg_error() -> str | None:
    import psycopg

    try:
        psycopg.connect(PG_DSN, connect_timeout=5).close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable yet"
        return str(exc)
    return None


def _mysql_error() -> str | None:
    import pymysql  # type: ignore[import-untyped]

    try:
        pymysql.connect(connect_timeout=5, **MYSQL).close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable yet"
        return str(exc)
    return None


def _wait(probe: Callable[[], str | None], timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    error = probe()
    while error is not None and time.monotonic() < deadline:
        time.sleep(1)
        error = probe()
    return error


_SETUP_HINT = (
    "scripts/services.sh installs (from Debian's packages), starts and prepares both servers; "
    "scripts/test.sh runs it first"
)


@functools.lru_cache(maxsize=1)
def postgres_dsn() -> str:
    """The PostgreSQL DSN, checked: the server answers (scripts/services.sh makes it so)."""
    error = _wait(_pg_error, 10)
    if error is not None:
        pytest.fail(
            f"PostgreSQL at {PG_DSN} is not reachable: {error}. {_SETUP_HINT}.", pytrace=False
        )
    return PG_DSN


@functools.lru_cache(maxsize=1)
def mysql_params() -> dict[str, Any]:
    """Connection parameters for MariaDB/MySQL, checked: the server answers."""
    error = _wait(_mysql_error, 10)
    if error is not None:
        where = f"{MYSQL['user']}@{MYSQL['host']}:{MYSQL['port']}/{MYSQL['database']}"
        pytest.fail(f"MariaDB at {where} is not reachable: {error}. {_SETUP_HINT}.", pytrace=False)
    return dict(MYSQL)


# -- stores on each server -----------------------------------------------------------------------


def drop_table(kind: str, table: str) -> None:
    """Remove a test table (the SQLite ones vanish with tmp_path)."""
    if kind == "postgres":
        import psycopg

        with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    elif kind == "mysql":
        import pymysql

        conn = pymysql.connect(autocommit=True, **mysql_params())
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        finally:
            conn.close()


class Backend:
    """One database for a test: the store under test, plus raw access to a results table."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind = kind
        self.tmp = tmp
        self.tables: list[str] = []
        self.results = self.new_table("results")
        self.stores: list[SqlOffsetStore] = []
        self.raw(f"CREATE TABLE {self.results} (k VARCHAR(64) NOT NULL, v INTEGER NOT NULL)")

    def new_table(self, prefix: str) -> str:
        name = unique_table(prefix)
        self.tables.append(name)
        return name

    def store(self, table: str | None = None) -> SqlOffsetStore:
        table = table or self.new_table("offsets")
        if self.kind == "sqlite":
            store = SqlOffsetStore.sqlite(self.tmp / "store.db", table=table)
        elif self.kind == "postgres":
            store = SqlOffsetStore.postgres(postgres_dsn(), table=table)
        else:
            store = SqlOffsetStore.mysql(**mysql_params(), table=table)
        self.stores.append(store)
        return store

    def raw(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on a fresh connection, committed; return its rows."""
        if self.kind == "sqlite":
            import sqlite3

            lite = sqlite3.connect(self.tmp / "store.db", isolation_level=None)
            try:
                return list(lite.execute(sql.replace("%s", "?"), params).fetchall())
            finally:
                lite.close()
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(postgres_dsn(), autocommit=True) as pg:
                cur = pg.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []
        import pymysql

        my = pymysql.connect(autocommit=True, **mysql_params())
        try:
            with my.cursor() as mcur:
                mcur.execute(sql, params)
                return list(mcur.fetchall())
        finally:
            my.close()

    def write(self, cur: Any, key: str, value: int) -> None:
        """The user's output, written through the store's transaction cursor."""
        ph = "?" if self.kind == "sqlite" else "%s"
        cur.execute(f"INSERT INTO {self.results} (k, v) VALUES ({ph}, {ph})", (key, value))

    def result_rows(self) -> list[tuple[str, int]]:
        return sorted((str(k), int(v)) for k, v in self.raw(f"SELECT k, v FROM {self.results}"))

    def close(self) -> None:
        for store in self.stores:
            store.close()
        for table in self.tables:
            drop_table(self.kind, table)
