"""The SQL that :class:`~kafka_direct.stores.sql_store.SqlOffsetStore` speaks, per database.
Pure: plain library, imports no database driver. Runs wherever the store runs (the Spark driver,
the user's process for the CLI).

One table holds every group's offsets::

    (group_id, topic, partition, next_offset, updated_at)   PRIMARY KEY (group_id, topic, partition)

``next_offset`` is the next offset to read, like a Kafka commit. The three dialects differ only
in quoting, placeholders, column types, the upsert and how a write transaction starts; the
statements are otherwise the same, so the store's logic is written once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kafka_direct.errors import ConfigurationError

__all__ = [
    "DIALECTS",
    "Dialect",
    "DialectName",
    "dialect_named",
    "is_conflict_error",
    "is_database_error",
]

DialectName = Literal["sqlite", "postgres", "mysql"]

# Schema-qualified names are allowed ("offsets.kafka_offsets"); anything else could smuggle SQL
# into statements that are built with the table name (placeholders cannot stand for names).
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")


_SERVER_FIX = (
    "Check that the database server is running and reachable at that address, and the user, "
    "password and database name."
)


@dataclass(frozen=True)
class Dialect:
    """How one database spells the offset table's statements."""

    name: DialectName
    #: DB-API paramstyle marker for this driver: ``?`` (sqlite3) or ``%s`` (psycopg, PyMySQL).
    placeholder: str
    quote_char: str
    text_type: str
    timestamp_type: str
    #: The database's clock, evaluated in SQL so every writer's ``updated_at`` uses one clock.
    now: str
    #: Statement that starts a write transaction, or None where the driver starts one implicitly.
    begin: str | None
    #: Suffix that makes a SELECT lock the rows it reads (empty where writers are serialized).
    lock_suffix: str
    #: What to check when the store cannot be opened (the end of OffsetStoreError's message).
    unusable_fix: str = _SERVER_FIX

    def quote(self, name: str) -> str:
        q = self.quote_char
        return ".".join(f"{q}{part}{q}" for part in name.split("."))

    def table(self, name: str) -> str:
        """The quoted table name, after refusing anything that is not a plain identifier."""
        if not _IDENT.match(name):
            raise ConfigurationError(
                "table",
                name,
                "a table name of letters, digits and underscores, optionally 'schema.table'",
                "Choose a plain identifier such as 'kafka_offsets'.",
            )
        return self.quote(name)

    # -- statements --------------------------------------------------------------------------

    def create_table(self, table: str) -> str:
        t, p = self.table(table), self.quote("partition")
        return (
            f"CREATE TABLE IF NOT EXISTS {t} ("
            f"group_id {self.text_type} NOT NULL, "
            f"topic {self.text_type} NOT NULL, "
            f"{p} INTEGER NOT NULL, "
            "next_offset BIGINT NOT NULL, "
            f"updated_at {self.timestamp_type} NOT NULL DEFAULT {self.now}, "
            f"PRIMARY KEY (group_id, topic, {p}))"
        )

    def table_exists(self, table: str) -> tuple[str, tuple[str | None, ...]]:
        """A query (and its parameters) that returns a non-NULL first column when ``table``
        exists, and no row or NULL when it does not. It needs no right to create anything, so
        a store whose user may only read and write the table finds it (PostgreSQL 15 grants
        no one CREATE on the public schema, and CREATE TABLE IF NOT EXISTS is refused without
        it even when the table exists)."""
        self.table(table)  # validated: the name appears in the SQL below only for SQLite
        schema, _, name = table.rpartition(".")
        ph = self.placeholder
        if self.name == "sqlite":
            master = f"{self.quote(schema)}.sqlite_master" if schema else "sqlite_master"
            return f"SELECT 1 FROM {master} WHERE type = 'table' AND name = {ph}", (name,)
        if self.name == "postgres":
            # The quoted name, resolved as the statements resolve it (search_path).
            return f"SELECT to_regclass({ph})", (self.quote(table),)
        return (
            "SELECT 1 FROM information_schema.tables "
            f"WHERE table_schema = COALESCE({ph}, DATABASE()) AND table_name = {ph}",
            (schema or None, name),
        )

    def select_group(self, table: str, *, lock: bool = False) -> str:
        t, p, ph = self.table(table), self.quote("partition"), self.placeholder
        suffix = self.lock_suffix if lock else ""
        return f"SELECT topic, {p}, next_offset FROM {t} WHERE group_id = {ph}{suffix}"

    def select_one(self, table: str, *, lock: bool = False) -> str:
        t, p, ph = self.table(table), self.quote("partition"), self.placeholder
        suffix = self.lock_suffix if lock else ""
        return (
            f"SELECT next_offset FROM {t} "
            f"WHERE group_id = {ph} AND topic = {ph} AND {p} = {ph}{suffix}"
        )

    def conditional_update(self, table: str) -> str:
        """Parameters: new offset, group, topic, partition, expected stored offset."""
        t, p, ph = self.table(table), self.quote("partition"), self.placeholder
        return (
            f"UPDATE {t} SET next_offset = {ph}, updated_at = {self.now} "
            f"WHERE group_id = {ph} AND topic = {ph} AND {p} = {ph} AND next_offset = {ph}"
        )

    def insert(self, table: str) -> str:
        """Parameters: group, topic, partition, offset. Fails on an existing row (the guard)."""
        t, p, ph = self.table(table), self.quote("partition"), self.placeholder
        return (
            f"INSERT INTO {t} (group_id, topic, {p}, next_offset, updated_at) "
            f"VALUES ({ph}, {ph}, {ph}, {ph}, {self.now})"
        )

    def upsert(self, table: str) -> str:
        """Parameters: group, topic, partition, offset. Overwrites, like a Kafka commit."""
        p = self.quote("partition")
        if self.name == "mysql":
            # VALUES() in ON DUPLICATE KEY is what both MySQL 5.7+ and MariaDB understand.
            tail = (
                "ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), "
                "updated_at = VALUES(updated_at)"
            )
        else:
            tail = (
                f"ON CONFLICT (group_id, topic, {p}) DO UPDATE SET "
                "next_offset = excluded.next_offset, updated_at = excluded.updated_at"
            )
        return f"{self.insert(table)} {tail}"


DIALECTS: dict[DialectName, Dialect] = {
    "sqlite": Dialect(
        name="sqlite",
        placeholder="?",
        quote_char='"',
        text_type="TEXT",
        timestamp_type="TEXT",
        now="CURRENT_TIMESTAMP",
        # IMMEDIATE takes the write lock up front: a second writer waits (busy timeout) instead
        # of failing later when it tries to upgrade a read lock.
        begin="BEGIN IMMEDIATE",
        lock_suffix="",
        unusable_fix="Check that the path names a database file (or a new one) in a directory "
        "that exists and that this process may write.",
    ),
    "postgres": Dialect(
        name="postgres",
        placeholder="%s",
        quote_char='"',
        text_type="VARCHAR(255)",
        timestamp_type="TIMESTAMPTZ",
        now="CURRENT_TIMESTAMP",
        begin=None,
        lock_suffix=" FOR UPDATE",
    ),
    "mysql": Dialect(
        name="mysql",
        placeholder="%s",
        quote_char="`",
        # Binary collation: Kafka names are case-sensitive, MySQL's default collation is not,
        # so 'Events' and 'events' would otherwise share a primary key.
        text_type="VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        timestamp_type="DATETIME(6)",
        now="CURRENT_TIMESTAMP(6)",
        begin=None,
        lock_suffix=" FOR UPDATE",
    ),
}


def dialect_named(name: str) -> Dialect:
    try:
        return DIALECTS[name]  # type: ignore[index]
    except KeyError:
        raise ConfigurationError(
            "dialect", name, "one of 'sqlite', 'postgres', 'mysql'", None
        ) from None


# MySQL/MariaDB error numbers and PostgreSQL SQLSTATEs meaning "another transaction got there
# first": a deadlock or serialization failure between two writers of the same offset rows.
_MYSQL_CONFLICT_CODES = {1213}  # ER_LOCK_DEADLOCK
_PG_CONFLICT_STATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure


def is_conflict_error(exc: BaseException) -> bool:
    """Whether a driver error means a concurrent writer won the race for the offset rows.

    Matched by DB-API class name and codes, so no driver has to be imported: an
    ``IntegrityError`` is the primary-key guard of a first insert firing.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "IntegrityError" in names:
        return True
    if getattr(exc, "sqlstate", None) in _PG_CONFLICT_STATES:
        return True
    args: tuple[object, ...] = tuple(getattr(exc, "args", ()))
    return bool(args) and "OperationalError" in names and args[0] in _MYSQL_CONFLICT_CODES


def is_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a DB-API driver's error (sqlite3, psycopg, PyMySQL...): every one
    derives from the standard's ``DatabaseError`` or ``InterfaceError``. Matched by class name,
    as :func:`is_conflict_error`, so no driver has to be imported."""
    return any(cls.__name__ in ("DatabaseError", "InterfaceError") for cls in type(exc).__mro__)
