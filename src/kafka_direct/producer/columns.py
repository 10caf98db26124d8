"""Which columns of a DataFrame the sink writes, matched as Spark's Kafka sink matches them. Pure:
plain library.

Runs in the Spark driver's Python process that builds the writer (``writer()`` /
``streamWriter()``), so a wrong column type is refused before the write starts; the result,
:class:`SinkColumns`, travels pickled to every write task, which reads the Arrow batches by the
column positions it holds. It sees the schema as ``(name, type)`` pairs, the type in Spark's
``simpleString`` form (``string``, ``binary``, ``int``, ``array<struct<key:string,value:binary>>``),
so it needs no Spark.

The columns, as in Spark (``KafkaWriter.validateQuery``), matched by their exact name (Spark
compares the names with ``==`` whatever ``spark.sql.caseSensitive`` says; a column that differs
only in case, such as ``Key``, is ignored like any other, and the warning names it):

==========  =========================================  =====================================
column      type                                       when missing or null
==========  =========================================  =====================================
value       string or binary (required)                null: a tombstone (a record without
                                                       value)
key         string or binary                           null key: the partitioner spreads
                                                       records
headers     array<struct<key: string, value: binary>>  no headers
topic       string                                     the ``topic`` option, which wins over
                                                       the column; neither: an error
partition   int                                        the partitioner (murmur2 of the key)
==========  =========================================  =====================================

Any other column is ignored, as Spark ignores it, and named once in a warning, so that a typo
such as ``vaule`` does not go unnoticed.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from kafka_direct.errors import ConfigurationError, SinkColumnError

__all__ = [
    "ALLOWED_TYPES",
    "HEADERS_TYPE",
    "SinkColumnError",
    "SinkColumns",
    "ignored_columns_warning",
    "plan_columns",
]

HEADERS_TYPE = "array<struct<key:string,value:binary>>"

#: Column → the Spark types the sink writes, in ``simpleString`` form.
ALLOWED_TYPES: dict[str, tuple[str, ...]] = {
    "value": ("string", "binary"),
    "key": ("string", "binary"),
    "headers": (HEADERS_TYPE,),
    "topic": ("string",),
    "partition": ("int",),
}

_FIXES = {
    "value": "Cast it, e.g. col('value').cast('string'), or serialize it: to_json(struct(...)).",
    "key": "Cast it, e.g. col('key').cast('string').",
    "headers": (
        "Build it as array(struct(lit('name').alias('key'), col('x').cast('binary')"
        ".alias('value'))), or rename the column if it is not meant as Kafka headers."
    ),
    "topic": "Cast it with col('topic').cast('string'), or set the 'topic' option.",
    "partition": "Cast it with col('partition').cast('int').",
}


@dataclass(frozen=True)
class SinkColumns:
    """Where each column the sink writes sits in the input batches (None: not present)."""

    names: tuple[str, ...]
    value: int
    value_is_string: bool
    key: int | None = None
    key_is_string: bool = False
    headers: int | None = None
    #: The 'topic' column, unless the ``topic`` option wins over it.
    topic_column: int | None = None
    partition: int | None = None
    #: The ``topic`` option: the topic of every record when set.
    topic: str | None = None
    #: Columns the sink does not write.
    ignored: tuple[str, ...] = ()
    #: Whether a 'topic' column is present but the ``topic`` option wins over it.
    topic_column_overridden: bool = False

    @property
    def simple(self) -> bool:
        """One topic, no headers, no explicit partition: the loop's fastest shape."""
        return self.topic_column is None and self.headers is None and self.partition is None


def plan_columns(fields: Sequence[tuple[str, str]], topic: str | None) -> SinkColumns:
    """Match ``fields`` (name, Spark ``simpleString`` type) to the sink's columns, and refuse a
    missing value, an ambiguous name, or a type the sink cannot write, naming the column, its
    type and the types allowed. ``topic`` is the ``topic`` option, or None."""
    names = tuple(name for name, _ in fields)
    found: dict[str, tuple[int, str]] = {}  # role (the column's exact name) → (position, type)
    ignored: list[str] = []
    for position, (name, kind) in enumerate(fields):
        if name not in ALLOWED_TYPES or name in found:
            # A second column of the same name: Spark takes the first one it finds.
            ignored.append(name)
            continue
        found[name] = (position, _normalise(kind))
    if "value" not in found:
        raise SinkColumnError(
            "value",
            None,
            "The Kafka sink needs a 'value' column (string or binary); the DataFrame has "
            f"{_listed(names) or 'no columns'}.",
            _did_you_mean("value", ignored)
            + "Select or alias one, e.g. df.select(to_json(struct('*')).alias('value')).",
        )
    overridden = topic is not None and "topic" in found
    for role, (_, kind) in found.items():
        if role == "topic" and overridden:
            continue  # the option wins, and Spark does not look at the column then
        allowed = ALLOWED_TYPES[role]
        if kind not in allowed:
            raise SinkColumnError(
                role,
                kind,
                f"Column '{role}' has type {kind}; the Kafka sink writes its '{role}' column "
                f"from {' or '.join(allowed)}.",
                _FIXES[role],
            )
    if topic is None and "topic" not in found:
        raise ConfigurationError(
            "topic",
            None,
            "a topic for the records: the 'topic' option, or a 'topic' column",
            _did_you_mean("topic", ignored)
            + "Set .option('topic', 'name'), or add a string column 'topic'.",
        )

    def at(role: str) -> int | None:
        entry = found.get(role)
        return None if entry is None else entry[0]

    return SinkColumns(
        names=names,
        value=found["value"][0],
        value_is_string=found["value"][1] == "string",
        key=at("key"),
        key_is_string="key" in found and found["key"][1] == "string",
        headers=at("headers"),
        topic_column=None if overridden else at("topic"),
        partition=at("partition"),
        topic=topic,
        ignored=tuple(ignored),
        topic_column_overridden=overridden,
    )


def _normalise(kind: str) -> str:
    # simpleString has no spaces, but a DDL-style type from a user's schema may.
    return "".join(kind.split()).lower()


def _listed(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _close_column(name: str, roles: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(name.lower(), roles, n=1, cutoff=0.6)
    return close[0] if close else None


def _did_you_mean(role: str, ignored: Sequence[str]) -> str:
    """ "Did you mean ...?" for an ignored column that looks like a misspelt ``role``, or ''."""
    typos = [name for name in ignored if _close_column(name, [role]) is not None]
    if not typos:
        return ""
    return f"Did you mean '{role}' (the column '{typos[0]}' is ignored)? "


def ignored_columns_warning(columns: SinkColumns) -> str | None:
    """The one warning for columns the sink does not write, or None."""
    if not columns.ignored:
        return None
    guesses = []
    for name in columns.ignored:
        role = _close_column(name, list(ALLOWED_TYPES))
        if role is not None:
            guesses.append(f"'{name}' -> did you mean '{role}'?")
    guessed = f" {'; '.join(guesses)}" if guesses else ""
    return (
        f"The Kafka sink ignores column(s) {_listed(columns.ignored)}: it writes only value, "
        f"key, headers, topic and partition (a misspelt name is ignored too).{guessed}"
    )
