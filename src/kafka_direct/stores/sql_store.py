"""Offsets in your own database, and exactly-once output through one transaction. Runs in the
Spark driver (the direct stream's ``offsetStore=``, ``foreachBatch`` functions, which PySpark
calls on the driver) and in the user's process (the CLI, ``startingOffsets`` from a store).

This is the "your own data store" recipe of Spark's Kafka guide: the batch's results and its
offsets are written in ONE database transaction, and the offsets only move with the check "the
stored next offset still equals where this batch starts"::

    with store.transaction("wordcount", offset_ranges) as cur:
        cur.executemany("INSERT ... ON CONFLICT (word) DO UPDATE SET n = n + excluded.n", rows)
    # committed together: the counts and the group's next offsets

The conditional update runs FIRST, before the body: the offset rows are the lock. A concurrent
writer of the same group waits on them and then finds them moved, so it fails with
:class:`~kafka_direct.errors.OffsetConflictError` before doing any work, and a replayed batch
fails the same way. Either way the transaction is rolled back, so nothing is applied twice.

After a crash. If the database committed but the process died before anything else recorded
the batch, the database already holds both the results and the new offsets. A reader that
resumes from the store (``KafkaUtils.createDirectStream(..., offsetStore=store)`` calls
``store.load`` at start; Structured Streaming uses ``starting_offsets_json``) starts after that
batch, so it is never replayed. Code that replays ranges of its own gets OffsetConflictError;
``already_applied(store, group, ranges)`` tells a replay (skip it) from a second writer (stop).

One class speaks three dialects (:mod:`kafka_direct.stores.sql_dialects`): SQLite (stdlib, the
embedded default), PostgreSQL (psycopg 3, extra ``postgres``) and MySQL/MariaDB (PyMySQL, extra
``mysql``). Any other DB-API driver of those databases works through the generic constructor.
"""

from __future__ import annotations

import importlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from kafka_direct.errors import ConfigurationError, OffsetConflictError
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.stores.base import OffsetStore, OffsetStoreError, ends_of
from kafka_direct.stores.sql_dialects import Dialect, DialectName, dialect_named, is_database_error
from kafka_direct.stores.sql_session import Connection, OffsetMismatch, StoreSession

__all__ = ["SqlOffsetStore", "StoreSession"]

log = logging.getLogger(__name__)

DEFAULT_TABLE = "kafka_offsets"


class SqlOffsetStore(OffsetStore):
    """Offsets in a SQL table: SQLite, PostgreSQL or MySQL/MariaDB.

    Construct with :meth:`sqlite`, :meth:`postgres` or :meth:`mysql`, or with any DB-API
    connection factory and its dialect. Connections are opened lazily and pooled (one per
    concurrent caller), so the store is safe to share between threads. On first use the store
    looks for its table and creates it if it is missing; with ``create_table=False`` it never
    runs DDL, and a missing table is an :class:`~kafka_direct.stores.OffsetStoreError` that
    shows the ``CREATE TABLE`` to run. A database user that may only read and write an
    existing table needs nothing more. ``repr`` shows where the store points, never a password.
    """

    def __init__(
        self,
        connect: Callable[[], Connection],
        dialect: DialectName | Dialect,
        *,
        table: str = DEFAULT_TABLE,
        target: str = "<connection factory>",
        create_table: bool = True,
        max_idle_connections: int = 4,
    ) -> None:
        self.dialect = dialect if isinstance(dialect, Dialect) else dialect_named(dialect)
        self.dialect.table(table)  # validate now, not at the first batch
        self.table = table
        self._connect = connect
        self._target = target
        self._create_table = create_table
        self._max_idle = max_idle_connections
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._table_ready = False
        self._closed = False
        #: Groups whose direct stream runs with failOnDataLoss=False (attach_stream): their
        #: transactions may start past the stored offset.
        self._gaps_allowed: dict[str, bool] = {}
        #: Scrubbed from the driver's messages (set by the constructors that know one).
        self._password = ""

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def sqlite(
        cls,
        path: str | os.PathLike[str],
        *,
        table: str = DEFAULT_TABLE,
        timeout_s: float = 30.0,
        create_table: bool = True,
    ) -> SqlOffsetStore:
        """A store in an SQLite file: the embedded default, no server needed."""
        location = os.fspath(path)

        def connect() -> Connection:
            # isolation_level=None: the store issues BEGIN IMMEDIATE itself. check_same_thread
            # is off because a pooled connection may serve another thread later (never two at
            # once: the pool hands each connection to one caller).
            return sqlite3.connect(
                location, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )

        return cls(connect, "sqlite", table=table, target=location, create_table=create_table)

    @classmethod
    def postgres(
        cls,
        dsn: str,
        *,
        table: str = DEFAULT_TABLE,
        connect_timeout_s: int = 10,
        create_table: bool = True,
    ) -> SqlOffsetStore:
        """A store in PostgreSQL, through psycopg 3 (``pip install 'kafka-direct[postgres]'``).

        ``dsn`` is a libpq connection string or URL; its password never appears in reprs,
        logs or errors.
        """
        psycopg = _import("psycopg", "postgres")
        target, password = _describe_dsn(psycopg, dsn)

        def connect() -> Connection:
            return psycopg.connect(dsn, autocommit=False, connect_timeout=connect_timeout_s)

        store = cls(connect, "postgres", table=table, target=target, create_table=create_table)
        store._password = password
        return store

    @classmethod
    def mysql(
        cls,
        *,
        database: str,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        table: str = DEFAULT_TABLE,
        connect_timeout_s: int = 10,
        create_table: bool = True,
        **connect_args: Any,
    ) -> SqlOffsetStore:
        """A store in MySQL or MariaDB, through PyMySQL (``pip install 'kafka-direct[mysql]'``).

        Extra keyword arguments go to ``pymysql.connect`` (``ssl=...``, ``unix_socket=...``).
        """
        pymysql = _import("pymysql", "mysql")

        def connect() -> Connection:
            return pymysql.connect(
                host=host,
                port=port,
                user=user,
                password=password,
                database=database,
                connect_timeout=connect_timeout_s,
                autocommit=False,
                charset="utf8mb4",
                **connect_args,
            )

        target = f"{user}@{host}:{port}/{database}"
        store = cls(connect, "mysql", table=table, target=target, create_table=create_table)
        store._password = password
        return store

    # -- the OffsetStore interface -----------------------------------------------------------

    @property
    def placeholder(self) -> str:
        """The parameter marker to use in your own statements: ``?`` or ``%s``."""
        return self.dialect.placeholder

    def load(self, group: str, tps: Iterable[TopicPartition] | None = None) -> PartitionOffsets:
        with self.session(write=False) as s:
            return s.stored(group, tps)

    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        """Store the end of ``ranges`` unconditionally (an upsert, like a Kafka commit)."""
        ends = ends_of(ranges)
        if not ends:
            return
        with self.session() as s:
            statement = self.dialect.upsert(self.table)
            for tp, offset in sorted(ends.items()):
                s.cursor.execute(statement, (group, tp.topic, tp.partition, offset))
        log.debug("Stored offsets of group '%s' in %r: %s", group, self, ends)

    @contextmanager
    def transaction(
        self, group: str, ranges: Sequence[OffsetRange], *, allow_gap: bool | None = None
    ) -> Iterator[Any]:
        """One database transaction that applies a batch exactly once; yields its cursor.

        First, each partition's stored next offset moves from the batch's ``fromOffset`` to its
        ``untilOffset`` (a partition never stored is inserted, guarded by the primary key).
        If any partition is elsewhere, nothing runs: the transaction is rolled back and
        :class:`~kafka_direct.errors.OffsetConflictError` names the partition, the stored
        offset and the batch's start. Then the body writes the batch's results through the
        cursor; leaving the block commits both, an exception rolls both back and propagates.
        Do not commit or roll back the cursor's connection yourself.

        A stored offset *below* the batch's start is a gap: records between them were never
        written through this store. That is what a stream that does not start from the store
        produces (``createDirectStream`` without ``offsetStore=store``: it starts from the
        Kafka group, or ``auto.offset.reset``), and committing it would lose them, so it is
        refused. Only records deleted before they were read leave a legitimate gap, so it is
        accepted, with a warning, when ``allow_gap`` is True, or (``allow_gap=None``, the
        default) when the direct stream of ``group`` keeps its offsets here and runs with
        ``failOnDataLoss=False``.
        """
        spans = _spans(ranges)
        gaps = self._gaps_allowed.get(group, False) if allow_gap is None else allow_gap
        with self.session() as s:
            for tp, (start, end) in sorted(spans.items()):
                s.advance(group, tp, start, end, insert_if_absent=True, allow_gap=gaps)
            yield s.cursor

    def attach_stream(self, group: str, *, fail_on_data_loss: bool) -> None:
        """A direct stream keeps ``group``'s offsets here: with ``failOnDataLoss=False`` its
        batches may start past the stored offset (records lost before they were read), and
        :meth:`transaction` accepts that gap."""
        self._gaps_allowed[group] = not fail_on_data_loss

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[StoreSession]:
        """A raw transaction on a pooled connection: committed when the block ends normally,
        rolled back on an exception. The building block of :meth:`transaction` and of
        :func:`~kafka_direct.stores.exactly_once_foreach_batch`.
        """
        conn = self._acquire()
        healthy = False
        try:
            # A pooled connection the server closed fails here, as does SQLite's BEGIN IMMEDIATE
            # after its busy timeout; a failed connection is closed (its cursor too) on release.
            with self._opening("start a transaction in"):
                cursor = conn.cursor()
                if write and self.dialect.begin:
                    cursor.execute(self.dialect.begin)
            try:
                yield StoreSession(self.dialect, self.table, conn, cursor)
            except BaseException:
                with suppress(Exception):
                    conn.rollback()
                raise
            finally:
                with suppress(Exception):
                    cursor.close()
            if write:
                conn.commit()
            else:
                # Ends MySQL's REPEATABLE READ snapshot, so the next load sees new commits.
                conn.rollback()
            healthy = True
        except OffsetMismatch as conflict:
            healthy = True  # rolled back cleanly; the connection is fine
            raise self._conflict_error(conflict) from None
        finally:
            self._release(conn, healthy)

    def __enter__(self) -> SqlOffsetStore:
        return self

    def __getstate__(self) -> dict[str, Any]:
        # Shipped by cloudpickle (Spark Connect runs foreachBatch functions in another
        # process): connections and the lock stay behind; the copy opens its own.
        state = self.__dict__.copy()
        state.update(_idle=[], _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)

    def __repr__(self) -> str:
        return f"SqlOffsetStore({self.dialect.name}, {self._target}, table={self.table})"

    # -- internals ---------------------------------------------------------------------------

    def _conflict_error(self, conflict: OffsetMismatch) -> OffsetConflictError:
        # Read after the rollback: the winner has committed by now, so this is its offset.
        try:
            now = self.load(conflict.group, conflict.starts)
        except Exception:  # noqa: BLE001 - the report must not hide the conflict itself
            log.warning("Could not read the stored offsets of group '%s'", conflict.group)
            now = {}
        details = []
        gaps = []
        for tp, start in sorted(conflict.starts.items()):
            stored = now.get(tp)
            shown = "no stored offset" if stored is None else f"stored next offset {stored}"
            if start is None:
                details.append(f"{tp}: {shown}, but this batch expected none to be stored yet")
            else:
                details.append(f"{tp}: {shown}, but this batch starts at offset {start}")
                if stored is not None and stored < start:
                    gaps.append(f"{stored} to {start - 1} of {tp}")
        fix = None
        if gaps and len(gaps) == len(details):
            fix = (
                f"The batch was not applied: offsets {', '.join(gaps)} were never written "
                "through this store, and committing would lose them. The stream did not start "
                "where the store stands: pass offsetStore=store to KafkaUtils.createDirectStream "
                "(it then starts from the store). If those records were deleted before they "
                "were read, run the stream with failOnDataLoss=False, or pass allow_gap=True "
                "to store.transaction."
            )
        return OffsetConflictError(conflict.group, "; ".join(details), fix=fix)

    def _acquire(self) -> Connection:
        with self._lock:
            if self._closed:
                raise ConfigurationError(
                    "offsetStore", repr(self), "an open store", "close() was called on it."
                )
            if self._idle:
                return self._idle.pop()
        with self._opening("connect to", self.dialect.unusable_fix):
            conn = self._connect()
        if not self._table_ready:
            try:
                fix = (
                    f"{self.dialect.unusable_fix} A user that may not create tables needs the "
                    "table created by its owner: create_table=False shows the statement."
                )
                with self._opening("find or create the offset table in", fix):
                    self._ensure_table(conn)
            except BaseException:
                _close_quietly(conn)
                raise
        return conn

    @contextmanager
    def _opening(self, doing: str, fix: str = "") -> Iterator[None]:
        """A database driver's error inside the block as :class:`OffsetStoreError`: only where
        the store opens a connection or a transaction, where it means the store cannot be used
        (down, unreachable, login refused, not a database). The SQL of a session (the user's,
        the offset updates whose conflicts the session recognises) keeps the driver's errors.
        """
        try:
            yield
        except Exception as exc:
            if not is_database_error(exc):
                raise
            text = " ".join(str(exc).split()) or "no message"  # drivers write several lines
            if self._password:
                text = text.replace(self._password, "<redacted>")
            raise OffsetStoreError(
                f"Could not {doing} the offset store {self!r}: {text} ({type(exc).__name__})."
                + (f" {fix}" if fix else "")
            ) from exc

    def _release(self, conn: Connection, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        _close_quietly(conn)

    def _ensure_table(self, conn: Connection) -> None:
        """Find the table, and create it only where it is missing (and allowed to)."""
        with self._lock:
            if self._table_ready:
                return
            for attempt in (1, 2):
                cursor = conn.cursor()
                try:
                    found = self._table_exists(cursor)
                    if not found and self._create_table:
                        cursor.execute(self.dialect.create_table(self.table))
                    conn.commit()
                    break
                except Exception:
                    # Two processes creating the table at once: PostgreSQL's IF NOT EXISTS can
                    # still fail for the loser; the second attempt finds the table.
                    with suppress(Exception):
                        conn.rollback()
                    if attempt == 2:
                        raise
                finally:
                    with suppress(Exception):
                        cursor.close()
            if not found and not self._create_table:
                raise OffsetStoreError(
                    f"The offset table {self.table} does not exist in the offset store {self!r}, "
                    "and the store may not create it (create_table=False). Have its owner "
                    f"create it: {self.dialect.create_table(self.table)}; then grant this user "
                    "SELECT, INSERT and UPDATE on it."
                )
            self._table_ready = True
            log.debug("Offset table %s %s in %r", self.table, "found" if found else "created", self)

    def _table_exists(self, cursor: Any) -> bool:
        query, params = self.dialect.table_exists(self.table)
        cursor.execute(query, params)
        row = cursor.fetchone()
        return row is not None and row[0] is not None


def _spans(ranges: Sequence[OffsetRange]) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition: the lowest fromOffset and highest untilOffset (split ranges are joined)."""
    spans: dict[TopicPartition, tuple[int, int]] = {}
    for r in ranges:
        tp = r.topic_partition
        start, end = spans.get(tp, (r.from_offset, r.until_offset))
        spans[tp] = (min(start, r.from_offset), max(end, r.until_offset))
    return spans


def _import(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigurationError(
            "offsetStore",
            extra,
            f"the '{module}' driver to be installed",
            f"Install it with: pip install 'kafka-direct[{extra}]'",
        ) from None


def _describe_dsn(psycopg: Any, dsn: str) -> tuple[str, str]:
    """The DSN without its password, for reprs and logs; and the password ('' if none), which
    the store scrubs from the driver's messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - the driver's message may quote the DSN, password and all
        raise ConfigurationError(
            "dsn",
            "<redacted>",
            "a libpq connection string or postgresql:// URL",
            "Check its syntax, e.g. 'postgresql://user@host:5432/dbname'.",
        ) from None
    user = params.get("user")
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or user or ""
    target = f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"
    return target, str(params.get("password") or "")


def _close_quietly(conn: Connection) -> None:
    with suppress(Exception):
        conn.close()
