"""Unit tests for kafka_direct.planning.pushdown, the rules, and the batch planner that applies
them. No broker, no Spark: the cluster is a FakeCluster, which answers timestamp lookups as
Kafka does (the narrowed reads on real Kafka: tests/integration/test_real_kafka_behaviour.py).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.batch import plan_batch_read, plan_given_ranges
from kafka_direct.planning.pushdown import (
    Predicate,
    describe_pushed,
    holds,
    is_handled,
    narrow_ranges,
    timestamp_bounds_ms,
)
from tests.unit.fake_reader import FakeCluster, FakeOffsetReader

BOOTSTRAP = {"kafka.bootstrap.servers": "localhost:9092"}
MS = 1000  # timestamps in predicates are microseconds


def P(column: Any, op: Any, *values: Any, negated: bool = False) -> Predicate:
    return Predicate(column, op, tuple(values), negated)


def NOT(p: Predicate) -> Predicate:
    return Predicate(p.column, p.op, p.values, not p.negated)


def plan(cluster: FakeCluster, pushed: list[Predicate], **options: str) -> list[OffsetRange]:
    opts = parse_source_options({**BOOTSTRAP, **options}, streaming=False)
    return plan_batch_read(opts, cluster.reader(), pushed)


def spans(ranges: list[OffsetRange]) -> list[tuple[str, int, int]]:
    return [(f"{r.topic}-{r.partition}", r.from_offset, r.until_offset) for r in ranges]


@pytest.fixture
def cluster() -> FakeCluster:
    """Topic t: 4 partitions of 10 records; u: 1 partition of 10. Timestamps: offset * 10 ms."""
    c = FakeCluster()
    c.create_topic("t", partitions=4)
    c.create_topic("u", partitions=1)
    for topic, partitions in (("t", 4), ("u", 1)):
        for p in range(partitions):
            c.append(topic, p, timestamps=[i * 10 for i in range(10)])
    return c


# --- the predicates -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "value", "expected"),
    [
        (P("partition", "=", 2), 2, True),
        (P("partition", "=", None), 2, None),  # = NULL is NULL ...
        (NOT(P("partition", "=", None)), 2, None),  # ... and so is its negation
        (P("partition", "<=>", None), 2, False),  # <=> is never NULL
        (NOT(P("partition", "<=>", None)), 2, True),
        (P("partition", "in", 1, None), 1, True),
        (P("partition", "in", 1, None), 2, None),
        (NOT(P("partition", "in", 1, None)), 2, None),  # NOT IN with a NULL keeps nothing
        (NOT(P("partition", "in", 1)), 2, True),
        (P("partition", "in"), 2, False),
        (P("offset", "<", 5), 4, True),
        (NOT(P("offset", "<", 5)), 4, False),
        (P("offset", "is null"), 4, False),  # these columns are never null
        (P("offset", "is not null"), 4, True),
        (P("topic", "starts with", "ev"), "events", True),
        (P("topic", "ends with", "ts"), "events", True),
        (P("topic", "contains", "x"), "events", False),
    ],
)
def test_holds_follows_sql_three_valued_logic(predicate, value, expected) -> None:
    assert holds(predicate, value) is expected


@pytest.mark.parametrize(
    ("predicate", "handled"),
    [
        (P("topic", "=", "t"), True),
        (NOT(P("topic", "in", "t", "u")), True),
        (P("topic", "contains", "t"), True),
        (P("partition", ">=", 2), True),
        (NOT(P("partition", "=", 2)), True),  # decided per partition: holes are fine
        (P("offset", ">=", 5), True),
        (NOT(P("offset", ">", 5)), True),  # offset <= 5
        (P("offset", "in", 3, 4, 5), True),  # consecutive: the clamped range is exactly them
        (P("offset", "in", 3, 5), False),  # offset 4 would be read too
        (NOT(P("offset", "=", 5)), False),  # a hole is not a range
        (NOT(P("offset", "in", 5, None)), True),  # nothing matches: exactly nothing is read
        (P("offset", "is not null"), True),
        (P("timestamp", ">=", 5 * MS), False),  # later records may be older (CreateTime)
        (P("timestamp", "<", 5 * MS), False),
        (P("timestamp", "is not null"), True),
        (P("timestamp", "is null"), True),
        (P("timestamp", "=", None), True),
    ],
)
def test_a_filter_is_handled_only_when_the_narrowed_ranges_make_it_redundant(
    predicate, handled
) -> None:
    assert is_handled(predicate) is handled


def test_predicates_that_cannot_narrow_a_kafka_read_are_refused() -> None:
    with pytest.raises(ValueError):
        P("topic", "<", "m")  # a topic's order depends on Spark's collation
    with pytest.raises(ValueError):
        P("offset", "starts with", "1")
    with pytest.raises(ValueError):
        P("offset", "=", "5")
    with pytest.raises(ValueError):
        P("partition", "=", True)


def test_predicates_read_as_sql() -> None:
    shown = describe_pushed(
        [P("partition", "in", 1, 2), NOT(P("offset", "<", 5)), P("timestamp", ">=", 1_500)]
    )
    assert shown == (
        "pushed: partition IN (1, 2), NOT (offset < 5); narrowing only (Spark applies them "
        "too): timestamp >= 1970-01-01T00:00:00.001500Z"
    )
    assert describe_pushed([]) == "nothing pushed"


@pytest.mark.parametrize(
    ("predicates", "bounds"),
    [
        ([P("timestamp", ">=", 5 * MS)], (5, None, False)),
        ([P("timestamp", ">", 5 * MS)], (6, None, False)),  # > 5000 us: 5001 us, so 6 ms
        ([P("timestamp", ">=", 5 * MS + 1)], (6, None, False)),
        ([P("timestamp", "<", 5 * MS)], (None, 5, False)),
        ([P("timestamp", "<=", 5 * MS)], (None, 6, False)),
        ([P("timestamp", "<", 5 * MS + 1)], (None, 6, False)),
        ([P("timestamp", "=", 5 * MS)], (5, 6, False)),
        ([P("timestamp", "=", 5 * MS + 500)], (6, 6, True)),  # no whole millisecond matches
        ([P("timestamp", "in", 7 * MS, 3 * MS)], (3, 8, False)),
        ([NOT(P("timestamp", "<", 5 * MS))], (5, None, False)),
        ([P("timestamp", ">", 5 * MS), P("timestamp", "<", 6 * MS)], (6, 6, True)),
    ],
)
def test_timestamp_bounds_round_microseconds_to_the_milliseconds_kafka_stores(
    predicates, bounds
) -> None:
    assert timestamp_bounds_ms(predicates) == bounds


# --- partitions and topics ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pushed", "kept"),
    [
        ([P("partition", "=", 2)], ["t-2"]),
        ([P("partition", "in", 0, 3, 7)], ["t-0", "t-3"]),
        ([P("partition", ">", 0), P("partition", "<=", 2)], ["t-1", "t-2"]),
        ([NOT(P("partition", "=", 1))], ["t-0", "t-2", "t-3"]),
        ([P("partition", "is null")], []),
        ([P("partition", "in", 1, None)], ["t-1"]),
    ],
)
def test_partition_filters_drop_the_partitions_that_cannot_match(cluster, pushed, kept) -> None:
    assert [s[0] for s in spans(plan(cluster, pushed, subscribe="t"))] == kept


def test_topic_filters_narrow_a_pattern_subscription(cluster) -> None:
    ranges = plan(cluster, [P("topic", "in", "u", "nope")], subscribePattern="[tu]")
    assert spans(ranges) == [("u-0", 0, 10)]
    assert plan(cluster, [NOT(P("topic", "=", "t"))], subscribePattern=".*") == ranges


def test_a_missing_subscribed_topic_fails_as_without_pushdown(cluster) -> None:
    with pytest.raises(TopicNotFoundError, match="missing"):
        plan(cluster, [P("topic", "=", "t")], subscribe="t,missing")


# --- offsets --------------------------------------------------------------------------------


def test_offset_bounds_clamp_every_range_and_the_narrower_bound_wins(cluster) -> None:
    options = {"assign": '{"t": [0, 1]}', "startingOffsets": '{"t": {"0": 4, "1": 0}}'}
    pushed = [P("offset", ">=", 2), P("offset", "<", 8)]
    assert spans(plan(cluster, pushed, **options)) == [("t-0", 4, 8), ("t-1", 2, 8)]
    options["endingOffsets"] = '{"t": {"0": 6, "1": 10}}'
    assert spans(plan(cluster, pushed, **options)) == [("t-0", 4, 6), ("t-1", 2, 8)]


def test_offset_in_reads_the_span_of_its_values(cluster) -> None:
    assert spans(plan(cluster, [P("offset", "in", 7, 3, None)], assign='{"t": [0]}')) == [
        ("t-0", 3, 8)
    ]


def test_contradicting_offset_bounds_read_nothing_and_ask_no_timestamps(cluster) -> None:
    reader = cluster.reader()
    opts = parse_source_options({**BOOTSTRAP, "subscribe": "t"}, streaming=False)
    pushed = [P("offset", ">", 5), P("offset", "<", 3), P("timestamp", ">=", 0)]
    assert plan_batch_read(opts, reader, pushed) == []
    assert reader.calls["for_timestamps"] == 0


def test_narrowed_ranges_are_split_after_narrowing(cluster) -> None:
    ranges = plan(cluster, [P("partition", "=", 0), P("offset", "<", 8)], subscribe="t")
    assert spans(ranges) == [("t-0", 0, 8)]
    split = plan(
        cluster, [P("partition", "=", 0), P("offset", "<", 8)], subscribe="t", minPartitions="4"
    )
    assert spans(split) == [("t-0", 0, 2), ("t-0", 2, 4), ("t-0", 4, 6), ("t-0", 6, 8)]


# --- timestamps -----------------------------------------------------------------------------


def test_a_lower_timestamp_bound_is_one_lookup_for_every_partition(cluster) -> None:
    reader = cluster.reader()
    opts = parse_source_options({**BOOTSTRAP, "subscribe": "t"}, streaming=False)
    ranges = plan_batch_read(opts, reader, [P("timestamp", ">=", 35 * MS)])
    assert spans(ranges) == [(f"t-{p}", 4, 10) for p in range(4)]
    lookups = [arg for method, arg in reader.log if method == "for_timestamps"]
    assert lookups == [{TopicPartition("t", p): 35 for p in range(4)}]


def test_no_record_that_recent_reads_nothing(cluster) -> None:
    assert plan(cluster, [P("timestamp", ">", 90 * MS)], subscribe="t") == []


def test_the_narrower_of_starting_timestamp_and_a_filter_wins(cluster) -> None:
    assert spans(
        plan(cluster, [P("timestamp", ">=", 35 * MS)], assign='{"t": [0]}', startingTimestamp="61")
    ) == [("t-0", 7, 10)]
    assert spans(
        plan(cluster, [P("timestamp", ">=", 65 * MS)], assign='{"t": [0]}', startingTimestamp="31")
    ) == [("t-0", 7, 10)]


def test_regression_out_of_order_create_times_after_the_start_are_kept() -> None:
    # CreateTime: a late record (offset 3, ts 1) follows newer ones; the start is the first
    # offset at or after the bound, and the late record stays in the range for Spark to drop.
    c = FakeCluster()
    c.create_topic("t")
    c.append("t", 0, timestamps=[1, 9, 5, 1, 7])
    assert spans(plan(c, [P("timestamp", ">=", 5 * MS)], subscribe="t")) == [("t-0", 1, 5)]


def test_regression_an_upper_bound_never_cuts_a_create_time_topic() -> None:
    # Cutting at the first offset with ts >= 5 (offset 1) would lose offset 3 (ts 1).
    c = FakeCluster()
    c.create_topic("t")
    c.append("t", 0, timestamps=[1, 9, 5, 1, 7])
    reader = c.reader()
    opts = parse_source_options({**BOOTSTRAP, "subscribe": "t"}, streaming=False)
    assert spans(plan_batch_read(opts, reader, [P("timestamp", "<", 5 * MS)])) == [("t-0", 0, 5)]
    assert reader.calls["timestamp_types"] == 1
    assert reader.calls["for_timestamps"] == 0


def test_an_upper_bound_cuts_log_append_time_topics_only(cluster) -> None:
    cluster.timestamp_types["u"] = "LogAppendTime"
    reader = cluster.reader()
    opts = parse_source_options({**BOOTSTRAP, "subscribePattern": "[tu]"}, streaming=False)
    pushed = [P("partition", "=", 0), P("timestamp", "<=", 40 * MS)]
    assert spans(plan_batch_read(opts, reader, pushed)) == [("t-0", 0, 10), ("u-0", 0, 5)]
    assert [a for m, a in reader.log if m == "timestamp_types"] == [["t", "u"]]
    assert [a for m, a in reader.log if m == "for_timestamps"] == [{TopicPartition("u", 0): 41}]


def test_both_timestamp_bounds_and_ending_offsets_take_the_narrowest(cluster) -> None:
    cluster.timestamp_types["u"] = "LogAppendTime"
    pushed = [P("timestamp", ">=", 20 * MS), P("timestamp", "<", 80 * MS)]
    assert spans(plan(cluster, pushed, subscribe="u")) == [("u-0", 2, 8)]
    assert spans(plan(cluster, pushed, subscribe="u", endingOffsets='{"u": {"0": 6}}')) == [
        ("u-0", 2, 6)
    ]


def test_negative_timestamp_bounds_are_never_sent_as_lookups(cluster) -> None:
    # -1 and -2 are ListOffsets' "latest" and "earliest", not timestamps.
    reader = cluster.reader()
    opts = parse_source_options({**BOOTSTRAP, "subscribe": "u"}, streaming=False)
    ranges = plan_batch_read(opts, reader, [P("timestamp", ">=", -2 * MS)])
    assert spans(ranges) == [("u-0", 0, 10)]
    assert reader.calls["for_timestamps"] == 0


class _NoTimestamps(FakeOffsetReader):
    def for_timestamps(self, stamps: Any) -> Any:
        raise KafkaClientError("Listing timestamp offsets: timed out", retriable=True)

    def timestamp_types(self, topics: Any) -> Any:
        raise KafkaClientError("Describing topic configs: Broker: Topic authorization failed")


def test_failed_lookups_only_cost_the_narrowing(cluster, caplog) -> None:
    cluster.timestamp_types["u"] = "LogAppendTime"
    opts = parse_source_options({**BOOTSTRAP, "subscribe": "u"}, streaming=False)
    pushed = [P("timestamp", ">=", 20 * MS), P("timestamp", "<", 80 * MS)]
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.pushdown"):
        ranges = plan_batch_read(opts, _NoTimestamps(cluster), pushed)
    assert spans(ranges) == [("u-0", 0, 10)]
    assert "timestamp lookup failed" in caplog.text
    assert "message.timestamp.type could not be read" in caplog.text


# --- ranges given exactly (offsetRanges: the DStream API, createRDD) -------------------------


def test_given_ranges_are_narrowed_without_asking_the_cluster() -> None:
    options = {
        **BOOTSTRAP,
        "offsetRanges": '[{"topic": "t", "partition": 0, "fromOffset": 0, "untilOffset": 10},'
        ' {"topic": "t", "partition": 1, "fromOffset": 5, "untilOffset": 9}]',
    }
    opts = parse_source_options(options, streaming=False)
    pushed = [P("partition", "=", 1), P("offset", ">", 6), P("timestamp", ">=", 5 * MS)]
    # No reader at all: the timestamp bound is left to Spark.
    assert spans(plan_given_ranges(opts, pushed)) == [("t-1", 7, 9)]
    assert spans(plan_given_ranges(opts)) == [("t-0", 0, 10), ("t-1", 5, 9)]


def test_narrowing_reports_what_it_did(cluster, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="kafka_direct.planning.batch"):
        plan(cluster, [P("partition", "=", 2), P("timestamp", ">=", 35 * MS)], subscribe="t")
    assert (
        "Filter pushdown (pushed: partition = 2; narrowing only (Spark applies them too): "
        "timestamp >= 1970-01-01T00:00:00.035000Z): 6 of 40 offsets left to read (kept 1 of 4 "
        "partitions; timestamp >= 35 ms: one ListOffsets request for 1 partition(s))"
    ) in caplog.text


def test_narrow_ranges_without_predicates_changes_nothing() -> None:
    ranges = [OffsetRange("t", 0, 3, 9)]
    narrowed = narrow_ranges(ranges, [], None)
    assert narrowed.ranges == ranges
    assert (narrowed.offsets_before, narrowed.offsets_after) == (6, 6)
