"""Unit tests of filter pushdown's Spark edge (kafka_direct.source.batch): PySpark's filters as
predicates, what ``pushFilters`` hands back, the reader's repr, the ``pushdown.enabled`` option,
and which reader PySpark gets. No broker, no Spark session (only PySpark's classes).
"""

from __future__ import annotations

import datetime as dt
import logging
import pickle
import types

import pytest
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import ConfigurationError
from kafka_direct.planning.pushdown import Predicate
from kafka_direct.source.batch import (
    PUSHDOWN_WORKER,
    FilteringKafkaBatchReader,
    KafkaBatchReader,
    batch_reader,
    to_predicate,
)

OPTIONS = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}
UTC = dt.timezone.utc


def options(**extra: str):
    return parse_source_options({**OPTIONS, **extra}, streaming=False)


@pytest.mark.parametrize(
    ("spark_filter", "predicate"),
    [
        (EqualTo(("partition",), 3), Predicate("partition", "=", (3,))),
        (EqualNullSafe(("offset",), None), Predicate("offset", "<=>", (None,))),
        (LessThan(("offset",), 10), Predicate("offset", "<", (10,))),
        (LessThanOrEqual(("partition",), 1), Predicate("partition", "<=", (1,))),
        (GreaterThan(("offset",), 10), Predicate("offset", ">", (10,))),
        (GreaterThanOrEqual(("offset",), 10), Predicate("offset", ">=", (10,))),
        (In(("partition",), [1, None, 2]), Predicate("partition", "in", (1, None, 2))),
        (IsNull(("topic",)), Predicate("topic", "is null")),
        (IsNotNull(("timestamp",)), Predicate("timestamp", "is not null")),
        (StringStartsWith(("topic",), "ev"), Predicate("topic", "starts with", ("ev",))),
        (StringEndsWith(("topic",), "ts"), Predicate("topic", "ends with", ("ts",))),
        (StringContains(("topic",), "en"), Predicate("topic", "contains", ("en",))),
        (Not(EqualTo(("topic",), "t")), Predicate("topic", "=", ("t",), negated=True)),
        (Not(Not(EqualTo(("partition",), 1))), Predicate("partition", "=", (1,))),
        # Spark sends the session time zone's instant: the same microsecond in any zone.
        (
            GreaterThanOrEqual(("timestamp",), dt.datetime(2024, 1, 1, 1, 0, 0, 1500, UTC)),
            Predicate("timestamp", ">=", (1_704_070_800_001_500,)),
        ),
        (
            LessThan(
                ("timestamp",),
                dt.datetime(2023, 12, 31, 20, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            ),
            Predicate("timestamp", "<", (1_704_070_800_000_000,)),
        ),
        (EqualTo(("PARTITION",), 3), Predicate("partition", "=", (3,))),
    ],
)
def test_spark_filters_become_predicates(spark_filter, predicate) -> None:
    assert to_predicate(spark_filter) == predicate


@pytest.mark.parametrize(
    "spark_filter",
    [
        EqualTo(("value",), b"x"),  # not a column pushdown can use
        EqualTo(("headers", "key"), "h"),  # a nested column
        LessThan(("topic",), "m"),  # a topic's order depends on Spark's collation
        EqualTo(("partition",), 1.5),
        EqualTo(("partition",), True),
        EqualTo(("offset",), "5"),
        EqualTo(("timestamp",), dt.datetime(2024, 1, 1)),  # no time zone: not an instant
        In(("partition",), [1, "2"]),
        Not(StringContains(("value",), "x")),
    ],
)
def test_filters_pushdown_cannot_use_are_left_to_spark(spark_filter) -> None:
    assert to_predicate(spark_filter) is None


def test_push_filters_returns_what_spark_must_still_apply_by_identity(caplog) -> None:
    reader = FilteringKafkaBatchReader(options())
    partition = EqualTo(("partition",), 2)
    not_null = IsNotNull(("offset",))
    offsets = In(("offset",), [5, 9])  # not consecutive: offsets 6-8 would be read too
    late = GreaterThanOrEqual(("timestamp",), dt.datetime(2024, 1, 1, tzinfo=UTC))
    value = EqualTo(("value",), b"x")
    with caplog.at_level(logging.INFO, logger="kafka_direct.source.batch"):
        left = list(reader.pushFilters([partition, not_null, offsets, late, value]))
    assert [id(f) for f in left] == [id(offsets), id(late), id(value)]
    assert [str(p) for p in reader.pushed] == [
        "partition = 2",
        "offset IS NOT NULL",
        "offset IN (5, 9)",
        "timestamp >= 2024-01-01T00:00:00Z",
    ]
    assert repr(reader) == (
        "FilteringKafkaBatchReader(subscribe=t; pushed: partition = 2, offset IS NOT NULL; "
        "narrowing only (Spark applies them too): offset IN (5, 9), "
        "timestamp >= 2024-01-01T00:00:00Z)"
    )
    assert "Filters pushed to subscribe=t" in caplog.text


def test_a_plain_reader_keeps_pysparks_push_filters() -> None:
    # PySpark's planner refuses a reader that overrides pushFilters while
    # spark.sql.python.filterPushdown.enabled is false (its default), even without a filter.
    reader = KafkaBatchReader(options())
    assert type(reader) is KafkaBatchReader
    assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters
    assert repr(reader) == (
        "KafkaBatchReader(subscribe=t; no filters offered "
        "(spark.sql.python.filterPushdown.enabled))"
    )


def _built_as(module_name: str, opts, as_spec: bool = False) -> KafkaBatchReader:
    """``batch_reader(opts)`` (what ``DataSource.reader`` does) called from code whose module is
    ``module_name``."""
    scope: dict[str, object] = {"batch_reader": batch_reader, "opts": opts}
    if as_spec:
        scope |= {"__name__": "__main__", "__spec__": types.SimpleNamespace(name=module_name)}
    else:
        scope["__name__"] = module_name
    exec("def build():\n    return batch_reader(opts)\n", scope)
    return scope["build"]()  # type: ignore[operator]


def test_pysparks_pushdown_worker_gets_the_filtering_reader() -> None:
    assert type(_built_as(PUSHDOWN_WORKER, options())) is FilteringKafkaBatchReader
    assert type(_built_as(PUSHDOWN_WORKER, options(), as_spec=True)) is FilteringKafkaBatchReader
    plan_worker = "pyspark.sql.worker.plan_data_source_read"
    assert type(_built_as(plan_worker, options())) is KafkaBatchReader


def test_pushdown_enabled_false_switches_pushdown_off() -> None:
    opts = options(**{"pushdown.enabled": "false"})
    reader = _built_as(PUSHDOWN_WORKER, opts)
    assert type(reader) is KafkaBatchReader
    filters = [EqualTo(("partition",), 1)]
    assert list(reader.pushFilters(filters)) == filters  # PySpark's own: nothing handled
    assert (
        repr(reader) == "KafkaBatchReader(subscribe=t; pushdown off: 'pushdown.enabled' is false)"
    )


def test_pushdown_enabled_option_is_checked() -> None:
    assert options().pushdown is True
    with pytest.raises(ConfigurationError, match="'true' or 'false'"):
        options(**{"pushdown.enabled": "maybe"})
    with pytest.raises(ConfigurationError, match=r"Did you mean 'pushdown\.enabled'"):
        parse_source_options({**OPTIONS, "pushdown.enable": "false"}, streaming=False)


def test_readers_pickle_with_their_class_and_pushed_filters() -> None:
    reader = FilteringKafkaBatchReader(options())
    reader.pushFilters([EqualTo(("partition",), 2)])
    copy = pickle.loads(pickle.dumps(reader))
    assert type(copy) is FilteringKafkaBatchReader
    assert copy.pushed == reader.pushed
    plain = pickle.loads(pickle.dumps(KafkaBatchReader(options())))
    assert type(plain) is KafkaBatchReader
