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

When the local server is not reachable, it is installed from Debian's packages, configured like
the project's machines, and started. If that fails the test fails: nothing is ever skipped.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.stores import SqlOffsetStore

log = logging.getLogger(__name__)

PG_DSN = os.environ.get("KAFKA_DIRECT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL: dict[str, Any] = {
    "host": os.environ.get("KAFKA_DIRECT_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("KAFKA_DIRECT_MYSQL_PORT", "3306")),
    "user": os.environ.get("KAFKA_DIRECT_MYSQL_USER", "root"),
    "password": os.environ.get("KAFKA_DIRECT_MYSQL_PASSWORD", ""),
    "database": os.environ.get("KAFKA_DIRECT_MYSQL_DATABASE", "test"),
}
_LOCAL = {"127.0.0.1", "localhost", "::1"}
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


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    log.info("db setup: %s", " ".join(cmd))
    return subprocess.run(
        cmd, check=check, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


def _apt_install(package: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, capture_output=True, timeout=600, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", package], check=True, capture_output=True, timeout=900, env=env
    )


# -- PostgreSQL --------------------------------------------------------------------------------


def _start_postgres() -> None:
    if not shutil.which("pg_ctlcluster"):
        _apt_install("postgresql")
    versions = sorted(os.listdir("/etc/postgresql"))
    version = versions[-1]
    # Trust auth on loopback, as on the project's machines (a fresh Debian cluster asks for a
    # password over TCP).
    hba = f"/etc/postgresql/{version}/main/pg_hba.conf"
    with open(hba) as f:
        text = f.read()
    if "127.0.0.1/32 trust" not in text:
        with open(hba, "w") as f:
            f.write("host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n" + text)
    _run("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start", check=False)
    _run("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "reload", check=False)
    _wait(lambda: None if _run("pg_isready", "-h", "127.0.0.1").returncode == 0 else "down", 30)
    _run("runuser", "-u", "postgres", "--", "createdb", "test", check=False)


@functools.lru_cache(maxsize=1)
def postgres_dsn() -> str:
    """The PostgreSQL DSN, with the server running (started or installed if need be)."""
    error = _pg_error()
    if error is None:
        return PG_DSN
    import psycopg

    host = psycopg.conninfo.conninfo_to_dict(PG_DSN).get("host") or "localhost"
    if host not in _LOCAL and not str(host).startswith("/"):
        pytest.fail(f"PostgreSQL at {host} is not reachable: {error}", pytrace=False)
    try:
        _start_postgres()
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"Could not install or start PostgreSQL: {exc}", pytrace=False)
    error = _wait(_pg_error, 60)
    if error is not None:
        pytest.fail(f"PostgreSQL did not come up: {error}", pytrace=False)
    return PG_DSN


# -- MariaDB / MySQL ---------------------------------------------------------------------------


def _start_mariadb() -> None:
    if not os.path.exists("/usr/sbin/mariadbd"):
        _apt_install("mariadb-server")
    os.makedirs("/run/mysqld", exist_ok=True)
    _run("chown", "mysql:mysql", "/run/mysqld", check=False)
    _run(
        "start-stop-daemon",
        "--start",
        "--oknodo",
        "--background",
        "--exec",
        "/usr/sbin/mariadbd",
    )
    sockets = ["/run/mysqld/mysqld.sock", *glob.glob("/var/run/mysqld/*.sock")]
    _wait(lambda: None if any(os.path.exists(s) for s in sockets) else "no socket", 60)
    # Root over TCP without a password, and the database `test`, as on the project's machines
    # (a fresh Debian server lets root in only through the socket).
    sql = (
        "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; "
        "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; "
        "CREATE DATABASE IF NOT EXISTS test; FLUSH PRIVILEGES;"
    )
    _run("mariadb", "-uroot", "-e", sql, check=False)


@functools.lru_cache(maxsize=1)
def mysql_params() -> dict[str, Any]:
    """Connection parameters for MariaDB/MySQL, with the server running."""
    error = _mysql_error()
    if error is None:
        return dict(MYSQL)
    if MYSQL["host"] not in _LOCAL:
        pytest.fail(f"MySQL at {MYSQL['host']} is not reachable: {error}", pytrace=False)
    try:
        _start_mariadb()
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"Could not install or start MariaDB: {exc}", pytrace=False)
    error = _wait(_mysql_error, 60)
    if error is not None:
        pytest.fail(f"MariaDB did not come up: {error}", pytrace=False)
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
