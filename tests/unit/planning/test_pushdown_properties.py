"""Property test of filter pushdown at the planning level, with timestamps: for random clusters
(out-of-order CreateTime, LogAppendTime, gaps, aged-out logs), random starting/ending options and
random filters as Spark pushes them, the rows of the pushed plan that pass the filters Spark
still applies are exactly the rows of the plan without pushdown that pass every filter.

The cluster is a FakeCluster, so that thousands of random layouts cost no broker; the same
property through Spark and real Kafka timestamp lookups is tests/integration/
test_pushdown_properties.py.
The filters' meaning comes from ``sql_truth`` below, written apart from the module under test.
No broker, no Spark session (only PySpark's filter classes).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import KafkaDirectError
from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.batch import plan_batch_read
from kafka_direct.planning.pushdown import is_handled
from kafka_direct.source.batch import to_predicate
from tests.unit.fake_reader import FakeCluster

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
ZONES = [dt.timezone.utc, dt.timezone(dt.timedelta(hours=-5)), dt.timezone(dt.timedelta(hours=9))]


@dataclass(frozen=True)
class Row:
    topic: str
    partition: int
    offset: int
    timestamp_us: int


# --- the reference: what a filter means, in SQL ----------------------------------------------


def sql_truth(f: Filter, row: Row) -> bool | None:
    """SQL's answer for ``f`` on ``row``: True, False or None (NULL)."""
    if isinstance(f, Not):
        inner = sql_truth(f.child, row)
        return None if inner is None else not inner
    value = {
        "topic": row.topic,
        "partition": row.partition,
        "offset": row.offset,
        "timestamp": EPOCH + dt.timedelta(microseconds=row.timestamp_us),
    }[f.attribute[0]]
    if isinstance(f, IsNull):
        return False
    if isinstance(f, IsNotNull):
        return True
    if isinstance(f, In):
        if any(v is not None and v == value for v in f.value):
            return True
        return None if any(v is None for v in f.value) else False
    if isinstance(f, EqualNullSafe):
        return f.value is not None and f.value == value
    if f.value is None:
        return None
    compare = {
        EqualTo: lambda a, b: a == b,
        LessThan: lambda a, b: a < b,
        LessThanOrEqual: lambda a, b: a <= b,
        GreaterThan: lambda a, b: a > b,
        GreaterThanOrEqual: lambda a, b: a >= b,
    }[type(f)]
    return bool(compare(value, f.value))


# --- random clusters, options and filters ----------------------------------------------------


@st.composite
def clusters(draw: Any) -> tuple[FakeCluster, dict[str, list[int]]]:
    """Topics a (CreateTime) and b (LogAppendTime when drawn), 1-3 partitions each."""
    cluster = FakeCluster()
    sizes: dict[str, list[int]] = {}
    for topic in ("a", "b"):
        partitions = draw(st.integers(1, 3))
        cluster.create_topic(topic, partitions)
        appended = topic == "b" and draw(st.booleans())
        if appended:
            cluster.timestamp_types[topic] = "LogAppendTime"
        sizes[topic] = []
        for p in range(partitions):
            stamps = draw(st.lists(st.integers(0, 12), max_size=10))
            if appended:
                stamps.sort()  # the broker stamps records in the order it appends them
            for stamp in stamps:
                if draw(st.integers(0, 5)) == 0:
                    cluster.gap(topic, p)  # a transaction marker
                cluster.append(topic, p, timestamps=[stamp])
            end = cluster.log(topic, p).log_end
            cluster.age_out(topic, p, draw(st.integers(0, min(end, 2))))
            sizes[topic].append(end)
    return cluster, sizes


def options(draw: Any, sizes: dict[str, list[int]]) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": "fake:9092", "subscribePattern": "[ab]"}
    start = draw(st.sampled_from(["earliest", "timestamp", "specific"]))
    if start == "timestamp":
        opts["startingTimestamp"] = str(draw(st.integers(0, 14)))
        opts["startingOffsetsByTimestampStrategy"] = "latest"
    elif start == "specific":
        opts["startingOffsets"] = json.dumps(
            {t: {str(p): -2 for p in range(len(ends))} for t, ends in sizes.items()}
        )
    end = draw(st.sampled_from(["latest", "timestamp"]))
    if end == "timestamp":
        opts["endingTimestamp"] = str(draw(st.integers(0, 14)))
    return opts


def literal(column: str) -> st.SearchStrategy[Any]:
    """A literal for ``column``: mostly values near the data, sometimes NULL."""
    if column == "topic":
        values: st.SearchStrategy[Any] = st.sampled_from(["a", "b", "c"])
    elif column == "partition":
        values = st.integers(-1, 3)
    elif column == "offset":
        values = st.integers(-1, 13)
    else:
        # Whole milliseconds and their neighbours (the ms -> us boundaries), in any time zone.
        values = st.builds(
            lambda ms, delta, zone: (
                EPOCH + dt.timedelta(microseconds=ms * 1000 + delta)
            ).astimezone(zone),
            st.integers(-2, 14),
            st.sampled_from([0, 0, -1, 1, 500]),
            st.sampled_from(ZONES),
        )
    return st.one_of(values, values, values, st.none())


@st.composite
def filters(draw: Any) -> Filter:
    column = draw(st.sampled_from(["topic", "partition", "offset", "offset", "timestamp"] * 2))
    attribute = (column,)
    kinds = [EqualTo, EqualNullSafe, In, IsNull, IsNotNull]
    if column != "topic":
        kinds += [LessThan, LessThanOrEqual, GreaterThan, GreaterThanOrEqual]
    kind = draw(st.sampled_from(kinds))
    if kind in (IsNull, IsNotNull):
        f: Filter = kind(attribute)
    elif kind is In:
        f = In(attribute, tuple(draw(st.lists(literal(column), min_size=1, max_size=4))))
    else:
        f = kind(attribute, draw(literal(column)))
    return Not(f) if draw(st.integers(0, 3)) == 0 else f


def rows_of(cluster: FakeCluster, ranges: list[OffsetRange]) -> list[Row]:
    out = []
    for r in ranges:
        for offset, stamp in cluster.log(r.topic, r.partition).records:
            if r.from_offset <= offset < r.until_offset:
                out.append(Row(r.topic, r.partition, offset, stamp * 1000))
    return sorted(out, key=lambda row: (row.topic, row.partition, row.offset))


@settings(
    max_examples=500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_pushed_plans_return_exactly_the_rows_of_unpushed_plans(data: Any) -> None:
    cluster, sizes = data.draw(clusters())
    opts = parse_source_options(options(data.draw, sizes), streaming=False)
    pushed_filters = data.draw(st.lists(filters(), min_size=1, max_size=4))
    predicates = [p for p in map(to_predicate, pushed_filters) if p is not None]
    handled = [f for f in pushed_filters if (p := to_predicate(f)) is not None and is_handled(p)]
    try:
        plain = plan_batch_read(opts, cluster.reader(), ())
    except KafkaDirectError as exc:
        # Pushdown never changes whether a read fails, nor how.
        try:
            plan_batch_read(opts, cluster.reader(), predicates)
        except KafkaDirectError as pushed_exc:
            assert str(pushed_exc) == str(exc)
            return
        raise AssertionError(f"the unpushed plan failed ({exc}), the pushed one did not") from exc
    pushed = plan_batch_read(opts, cluster.reader(), predicates)

    expected = [
        row for row in rows_of(cluster, plain) if all(sql_truth(f, row) for f in pushed_filters)
    ]
    left_to_spark = [f for f in pushed_filters if not any(f is h for h in handled)]
    got = [row for row in rows_of(cluster, pushed) if all(sql_truth(f, row) for f in left_to_spark)]
    assert got == expected
    # Handled filters hold for every row the narrowed plan reads.
    assert all(sql_truth(f, row) for f in handled for row in rows_of(cluster, pushed))
