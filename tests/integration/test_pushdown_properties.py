"""Property test of filter pushdown through a real local Spark and the session's broker: for random
``where`` clauses on partition, offset and timestamp (AND, OR, NOT, NULLs, boundaries, IN lists,
<=>), with random starting and ending offsets, the query returns exactly the rows of the same
query with ``pushdown.enabled=false``, and its tasks never read more.

Spark splits the top-level ANDs and never pushes an OR: ORs are here so that pushdown is seen
not to break what Spark alone applies. On Apache Kafka timestamp bounds narrow the read through
real timestamp lookups (on the embedded Tansu broker, which answers every lookup with offset 0,
they narrow nothing). Layouts this test does not draw (out-of-order CreateTimes, LogAppendTime,
aged-out logs) are checked at the planning level in tests/unit/planning/test_pushdown_properties.py.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_direct.testing.broker import create_topic
from tests.integration.kafka_helpers import new_topic_name, tansu_log_end_workaround
from tests.integration.test_pushdown import CONF, keys, tasks_read

PARTITIONS = 3
PER_PARTITION = 12
BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def stamped_topic(spark: Any, kafka_bootstrap: str) -> Iterator[tuple[str, dict[int, list[int]]]]:
    """A topic of 3 x 12 records whose CreateTime timestamps are out of order; the timestamps
    per partition, by offset."""
    topic = new_topic_name("pushprop")
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    rnd = random.Random(11)
    stamps = {p: [BASE_MS + rnd.randrange(20) for _ in range(PER_PARTITION)] for p in range(3)}
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for p, row in stamps.items():
        for i, stamp in enumerate(row):
            producer.produce(topic, b"%d" % i, partition=p, timestamp=stamp)
            if i >= PER_PARTITION - 2 and tansu_log_end_workaround():
                # Tansu's log end is the last batch's first offset: the last record goes in a
                # batch of its own there (docs/brokers.md).
                assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    previous = spark.conf.get(CONF)
    spark.conf.set(CONF, "true")
    yield topic, stamps
    spark.conf.set(CONF, previous)


def timestamp_literal(draw: Any) -> str:
    us = (BASE_MS + draw(st.integers(-1, 21))) * 1000 + draw(st.sampled_from([0, 0, -1, 1, 500]))
    shown = (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat(sep=" ")
    return f"TIMESTAMP '{shown}'"


@st.composite
def atoms(draw: Any) -> str:
    column = draw(st.sampled_from(["partition", "offset", "offset", "timestamp", "topic"]))
    if column == "topic":
        return draw(st.sampled_from(["topic = '{t}'", "topic <> '{t}'", "topic IN ('{t}', 'x')"]))

    def literal() -> str:
        if draw(st.integers(0, 6)) == 0:
            return "NULL"
        if column == "timestamp":
            return timestamp_literal(draw)
        return str(draw(st.integers(-1, 3 if column == "partition" else PER_PARTITION + 1)))

    shape = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "between", "null", "nullsafe"]))
    if shape == "cmp":
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        return f"{column} {op} {literal()}"
    if shape == "in":
        values = ", ".join(literal() for _ in range(draw(st.integers(1, 4))))
        return f"{column} {draw(st.sampled_from(['IN', 'NOT IN']))} ({values})"
    if shape == "between":
        return f"{column} BETWEEN {literal()} AND {literal()}"
    if shape == "nullsafe":
        return f"{column} <=> {literal()}"
    return f"{column} IS {draw(st.sampled_from(['NULL', 'NOT NULL']))}"


def clauses(depth: int = 2) -> st.SearchStrategy[str]:
    if depth == 0:
        return atoms()
    smaller = clauses(depth - 1)
    return st.one_of(
        atoms(),
        st.builds(lambda a, b: f"({a} AND {b})", smaller, smaller),
        st.builds(lambda a, b: f"({a} OR {b})", smaller, smaller),
        st.builds(lambda a: f"NOT ({a})", smaller),
    )


@st.composite
def bounds(draw: Any, topic: str) -> dict[str, str]:
    """Random startingOffsets/endingOffsets, or none."""
    out = {}
    if draw(st.booleans()):
        starts = {str(p): draw(st.integers(0, PER_PARTITION)) for p in range(PARTITIONS)}
        out["startingOffsets"] = json.dumps({topic: starts})
        if draw(st.booleans()):
            ends = {p: draw(st.integers(start, PER_PARTITION)) for p, start in starts.items()}
            out["endingOffsets"] = json.dumps({topic: ends})
    return out


@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_pushed_queries_return_exactly_the_rows_of_unpushed_queries(
    data: Any, reader: Any, task_stats_dir: Path, stamped_topic: tuple[str, Any]
) -> None:
    topic, _ = stamped_topic
    where = " AND ".join(
        c.format(t=topic) for c in data.draw(st.lists(clauses(), min_size=1, max_size=3))
    )
    options = data.draw(bounds(topic))
    since = time.time()
    pushed = keys(reader(subscribe=topic, **options).load().where(where))
    middle = time.time()
    plain = keys(
        reader(subscribe=topic, **{"pushdown.enabled": "false"}, **options).load().where(where)
    )
    assert pushed == plain, where
    read_plain = sum(tasks_read(task_stats_dir, topic, middle).values())
    read_pushed = sum(tasks_read(task_stats_dir, topic, since).values()) - read_plain
    assert read_pushed <= read_plain, where
