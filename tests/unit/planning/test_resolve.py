"""Unit tests for kafka_direct.planning.resolve through plan_batch_read (``spark.read``): where a
bounded read starts and ends, against an in-memory cluster. No broker, no Spark.

The cluster's timestamp lookups are answered as Kafka answers them; what Kafka itself answers
(after retention too) is read end to end in tests/integration/test_real_kafka_behaviour.py. Here:
how the planner turns the answers into ranges. Options are given as the strings a user would
pass to ``.option()``.
"""

from __future__ import annotations

import logging

import pytest

from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError, DataLossError, TopicNotFoundError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.batch import plan_batch_read
from tests.unit.fake_reader import FakeCluster, FakeOffsetReader

BOOTSTRAP = {"kafka.bootstrap.servers": "localhost:9092"}
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def batch_options(options: dict[str, str]) -> SourceOptions:
    return parse_source_options({**BOOTSTRAP, **options}, streaming=False)


def plan(cluster: FakeCluster, options: dict[str, str]) -> list[OffsetRange]:
    return plan_batch_read(batch_options(options), cluster.reader())


def spans(ranges: list[OffsetRange]) -> list[tuple[str, int, int]]:
    """Ranges as ("t-0", from, until), the shape the expectations below are written in."""
    return [(f"{r.topic}-{r.partition}", r.from_offset, r.until_offset) for r in ranges]


@pytest.fixture
def cluster() -> FakeCluster:
    """t-0 holds offsets [2, 10) (0 and 1 aged out), t-1 holds [0, 5)."""
    c = FakeCluster()
    c.create_topic("t", partitions=2, records=[10, 5])
    c.age_out("t", 0, 2)
    return c


@pytest.fixture
def stamped() -> FakeCluster:
    """Timestamps: t-0 = 100, 200, 300, 400 at offsets 0-3; t-1 = 150, 250 at offsets 0-1."""
    c = FakeCluster()
    c.create_topic("t", partitions=2)
    c.append("t", 0, timestamps=[100, 200, 300, 400])
    c.append("t", 1, timestamps=[150, 250])
    return c


# --- startingOffsets / endingOffsets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [("t-0", 2, 10), ("t-1", 0, 5)]),  # batch default: earliest to latest
        ({"startingOffsets": "earliest"}, [("t-0", 2, 10), ("t-1", 0, 5)]),
        (
            {"startingOffsets": "EARLIEST", "endingOffsets": "latest"},
            [("t-0", 2, 10), ("t-1", 0, 5)],
        ),
        ({"startingOffsets": '{"t": {"0": -2, "1": 3}}'}, [("t-0", 2, 10), ("t-1", 3, 5)]),
        ({"startingOffsets": '{"t": {"0": 4, "1": 0}}'}, [("t-0", 4, 10), ("t-1", 0, 5)]),
        ({"startingOffsets": '{"t": {"0": 10, "1": 5}}'}, []),  # at the log end: nothing to read
        ({"endingOffsets": '{"t": {"0": -1, "1": 4}}'}, [("t-0", 2, 10), ("t-1", 0, 4)]),
        ({"endingOffsets": '{"t": {"0": 7, "1": -1}}'}, [("t-0", 2, 7), ("t-1", 0, 5)]),
        (
            {
                "startingOffsets": '{"t": {"0": 3, "1": -2}}',
                "endingOffsets": '{"t": {"0": 6, "1": 0}}',
            },
            [("t-0", 3, 6)],  # t-1's [0, 0) is empty and dropped
        ),
        (
            {"assign": '{"t": [1]}', "startingOffsets": '{"t": {"1": 2}}'},
            [("t-1", 2, 5)],  # assign reads only the listed partitions
        ),
    ],
)
def test_starting_and_ending_offsets(
    cluster: FakeCluster, options: dict[str, str], expected: list[tuple[str, int, int]]
) -> None:
    options = {"subscribe": "t", **options} if "assign" not in options else options
    assert spans(plan(cluster, options)) == expected


def test_json_without_an_entry_for_every_partition_names_the_missing_one(
    cluster: FakeCluster,
) -> None:
    with pytest.raises(ConfigurationError, match=r"no entry for t-1") as err:
        plan(cluster, {"subscribe": "t", "startingOffsets": '{"t": {"0": 3}}'})
    assert err.value.option == "startingOffsets"


def test_ending_json_without_an_entry_for_every_partition_names_the_missing_one(
    cluster: FakeCluster,
) -> None:
    with pytest.raises(ConfigurationError, match=r"no entry for t-0") as err:
        plan(cluster, {"subscribe": "t", "endingOffsets": '{"t": {"1": 3}}'})
    assert err.value.option == "endingOffsets"


@pytest.mark.parametrize(
    ("offsets", "named"),
    [
        ('{"t": {"0": 3, "1": 0, "7": 0}}', "t-7"),  # a partition t does not have
        ('{"t": {"0": 3, "1": 0}, "u": {"0": 0}}', "u-0"),  # a topic the query does not read
    ],
)
def test_json_with_a_partition_the_query_does_not_read_is_refused(
    cluster: FakeCluster, offsets: str, named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named) as err:
        plan(cluster, {"subscribe": "t", "startingOffsets": offsets})
    assert err.value.option == "startingOffsets"


def test_starting_offset_beyond_the_log_end_is_a_configuration_error(cluster: FakeCluster) -> None:
    # Not data loss: an offset past the end would otherwise look like a recreated topic.
    with pytest.raises(ConfigurationError, match=r"t-1: 6.*log end offset 5 of t-1") as err:
        plan(cluster, {"subscribe": "t", "startingOffsets": '{"t": {"0": 3, "1": 6}}'})
    assert err.value.option == "startingOffsets"


def test_ending_offset_beyond_the_log_end_is_a_configuration_error(cluster: FakeCluster) -> None:
    # Executors would otherwise wait kafkaConsumer.pollTimeoutMs for offsets that do not exist.
    with pytest.raises(ConfigurationError, match=r"t-1: 9.*log end offset 5 of t-1") as err:
        plan(cluster, {"subscribe": "t", "endingOffsets": '{"t": {"0": -1, "1": 9}}'})
    assert err.value.option == "endingOffsets"


def test_starting_offset_below_the_log_start_fails_with_data_loss(cluster: FakeCluster) -> None:
    with pytest.raises(DataLossError, match=r"t-0: starting offset 0 .* earliest .* 2") as err:
        plan(cluster, {"subscribe": "t", "startingOffsets": '{"t": {"0": 0, "1": 0}}'})
    assert (err.value.topic, err.value.partition) == ("t", 0)
    assert "failOnDataLoss" in str(err.value)


def test_starting_offset_below_the_log_start_warns_and_starts_at_earliest_without_fail(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    options = {
        "subscribe": "t",
        "startingOffsets": '{"t": {"0": 1, "1": 0}}',
        "failOnDataLoss": "false",
    }
    with caplog.at_level(logging.WARNING):
        ranges = plan(cluster, options)
    assert spans(ranges) == [("t-0", 2, 10), ("t-1", 0, 5)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "t-0" in warnings[0]
    assert "skipping 1 records" in warnings[0]
    assert "continuing from offset 2" in warnings[0]


def test_start_after_end_is_a_configuration_error(cluster: FakeCluster) -> None:
    options = {
        "subscribe": "t",
        "startingOffsets": '{"t": {"0": 8, "1": 0}}',
        "endingOffsets": '{"t": {"0": 5, "1": -1}}',
    }
    with pytest.raises(ConfigurationError, match=r"t-0: start 8, end 5"):
        plan(cluster, options)


def test_ending_offset_below_the_log_start_is_start_after_end(cluster: FakeCluster) -> None:
    # earliest resolves to 2, so an end of 1 is before the start.
    options = {"subscribe": "t", "endingOffsets": '{"t": {"0": 1, "1": -1}}'}
    with pytest.raises(ConfigurationError, match=r"t-0: start 2, end 1"):
        plan(cluster, options)


# --- missing topics and partitions ----------------------------------------------------------------


def test_subscribe_to_a_missing_topic_in_a_batch_names_it(cluster: FakeCluster) -> None:
    with pytest.raises(TopicNotFoundError, match=r"'subscribe' names topic\(s\) nope,"):
        plan(cluster, {"subscribe": "t,nope"})


def test_subscribe_to_missing_topics_names_all_of_them(cluster: FakeCluster) -> None:
    with pytest.raises(TopicNotFoundError, match=r"topic\(s\) a, b,"):
        plan(cluster, {"subscribe": "b,t,a"})


@pytest.mark.parametrize(
    ("assign", "expected"),
    [
        ('{"t": [0, 5]}', [("t-0", 2, 10)]),
        ('{"t": [5]}', []),
    ],
)
def test_an_assigned_partition_the_topic_lacks_is_left_out_as_in_spark(
    cluster: FakeCluster, assign: str, expected: list[tuple[str, int, int]]
) -> None:
    # Spark's AssignStrategy keeps the assigned partitions that DescribeTopics lists.
    assert spans(plan(cluster, {"assign": assign})) == expected


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        # Spark asserts that the JSON names exactly the partitions read: t-5 is not one.
        pytest.param(
            {"startingOffsets": '{"t": {"0": -2, "5": -2}}'},
            ConfigurationError,
            r"'startingOffsets': got 't-5'",
            id="startingOffsets",
        ),
        pytest.param(
            {"endingOffsets": '{"t": {"0": -1, "5": -1}}'},
            ConfigurationError,
            r"'endingOffsets': got 't-5'",
            id="endingOffsets",
        ),
        pytest.param(
            {"startingOffsetsByTimestamp": '{"t": {"0": 1, "5": 1}}'},
            ConfigurationError,
            r"'startingOffsetsByTimestamp': got 't-5'",
            id="startingOffsetsByTimestamp",
        ),
        # A topic the cluster does not have: Spark's DescribeTopics fails on it.
        pytest.param(
            {"assign": '{"t": [0], "nope": [0]}'}, TopicNotFoundError, r"nope-0", id="no topic"
        ),
    ],
)
def test_a_read_naming_an_assigned_partition_that_does_not_exist_fails_as_in_spark(
    cluster: FakeCluster, options: dict[str, str], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        plan(cluster, {"assign": '{"t": [0, 5]}', **options})


def test_subscribe_pattern_matching_nothing_is_an_empty_batch(cluster: FakeCluster) -> None:
    # Spark's behaviour; only an explicitly named topic is treated as a typo.
    assert plan(cluster, {"subscribePattern": "nothing-.*"}) == []


def test_subscribe_pattern_reads_every_matching_topic(cluster: FakeCluster) -> None:
    cluster.create_topic("t2", records=3)
    cluster.create_topic("x", records=3)
    assert spans(plan(cluster, {"subscribePattern": "t.*"})) == [
        ("t-0", 2, 10),
        ("t-1", 0, 5),
        ("t2-0", 0, 3),
    ]


@pytest.mark.parametrize(
    ("pattern", "topics"),
    [
        # Spark's SubscribePatternStrategy keeps a topic when findFirstIn finds the pattern.
        ("orders", ["legacy-orders", "orders", "orders-eu"]),
        ("^orders", ["orders", "orders-eu"]),
        ("orders$", ["legacy-orders", "orders"]),
        ("^orders$", ["orders"]),
        ("^(orders|payments)$", ["orders", "payments"]),
        ("ord.rs-", ["orders-eu"]),
    ],
)
def test_subscribe_pattern_matches_anywhere_in_a_name_as_in_spark(
    pattern: str, topics: list[str]
) -> None:
    cluster = FakeCluster()
    for name in ("orders", "orders-eu", "legacy-orders", "payments", "x"):
        cluster.create_topic(name, records=1)
    read = plan(cluster, {"subscribePattern": pattern})
    assert sorted({r.topic for r in read}) == topics


# --- timestamps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # The first offset whose timestamp is >= the given one, per partition.
        ({"startingTimestamp": "200"}, [("t-0", 1, 4), ("t-1", 1, 2)]),
        ({"startingTimestamp": "0"}, [("t-0", 0, 4), ("t-1", 0, 2)]),
        ({"startingTimestamp": "250"}, [("t-0", 2, 4), ("t-1", 1, 2)]),
        (
            {"startingOffsetsByTimestamp": '{"t": {"0": 301, "1": 0}}'},
            [("t-0", 3, 4), ("t-1", 0, 2)],
        ),
        # No record that recent, strategy latest: that partition starts at its latest offset.
        (
            {"startingTimestamp": "260", "startingOffsetsByTimestampStrategy": "latest"},
            [("t-0", 2, 4)],
        ),
        (
            {
                "startingOffsetsByTimestamp": '{"t": {"0": 999, "1": 150}}',
                "startingOffsetsByTimestampStrategy": "LATEST",
            },
            [("t-1", 0, 2)],
        ),
        # Ending: exclusive end at the first offset >= the timestamp; no match means latest.
        ({"endingTimestamp": "300"}, [("t-0", 0, 2), ("t-1", 0, 2)]),
        ({"endingTimestamp": "150"}, [("t-0", 0, 1)]),  # t-1 ends at 0: empty, dropped
        (
            {"endingOffsetsByTimestamp": '{"t": {"0": 150, "1": 9999}}'},
            [("t-0", 0, 1), ("t-1", 0, 2)],
        ),
        (
            {"startingTimestamp": "150", "endingTimestamp": "400"},
            [("t-0", 1, 3), ("t-1", 0, 2)],
        ),
    ],
)
def test_timestamp_options(
    stamped: FakeCluster, options: dict[str, str], expected: list[tuple[str, int, int]]
) -> None:
    assert spans(plan(stamped, {"subscribe": "t", **options})) == expected


def test_timestamp_lookup_asks_the_cluster_for_the_given_timestamps(stamped: FakeCluster) -> None:
    reader = FakeOffsetReader(stamped)
    opts = batch_options(
        {"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 301, "1": 7}}'}
    )
    plan_batch_read(opts, reader)
    assert [arg for method, arg in reader.log if method == "for_timestamps"] == [{T0: 301, T1: 7}]


@pytest.mark.parametrize(
    "options",
    [
        {"startingTimestamp": "260"},
        {"startingTimestamp": "260", "startingOffsetsByTimestampStrategy": "error"},
        {"startingOffsetsByTimestamp": '{"t": {"0": 100, "1": 260}}'},
    ],
)
def test_starting_timestamp_without_a_match_fails_with_strategy_error(
    stamped: FakeCluster, options: dict[str, str]
) -> None:
    with pytest.raises(ConfigurationError, match="startingOffsetsByTimestampStrategy") as err:
        plan(stamped, {"subscribe": "t", **options})
    assert "t-1" in str(err.value)
    assert "260" in str(err.value)
    assert err.value.option == next(iter(options))


def test_by_timestamp_json_must_cover_every_partition(stamped: FakeCluster) -> None:
    with pytest.raises(ConfigurationError, match="no entry for t-1") as err:
        plan(stamped, {"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": 100}}'})
    assert err.value.option == "startingOffsetsByTimestamp"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # Spark's precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
        (
            {
                "startingTimestamp": "300",
                "startingOffsetsByTimestamp": '{"t": {"0": 200, "1": 200}}',
                "startingOffsets": '{"t": {"0": 0, "1": 0}}',
            },
            [("t-0", 2, 4)],  # t-1 has nothing at or after 300: latest
        ),
        (
            {
                "startingOffsetsByTimestamp": '{"t": {"0": 200, "1": 200}}',
                "startingOffsets": '{"t": {"0": 0, "1": 0}}',
            },
            [("t-0", 1, 4), ("t-1", 1, 2)],
        ),
        ({"startingOffsets": '{"t": {"0": 0, "1": 0}}'}, [("t-0", 0, 4), ("t-1", 0, 2)]),
        # The same precedence for the end.
        (
            {
                "endingTimestamp": "300",
                "endingOffsetsByTimestamp": '{"t": {"0": 400, "1": 400}}',
                "endingOffsets": '{"t": {"0": 1, "1": 1}}',
            },
            [("t-0", 0, 2), ("t-1", 0, 2)],
        ),
        (
            {
                "endingOffsetsByTimestamp": '{"t": {"0": 400, "1": 200}}',
                "endingOffsets": '{"t": {"0": 1, "1": 1}}',
            },
            [("t-0", 0, 3), ("t-1", 0, 1)],
        ),
    ],
)
def test_timestamp_options_take_precedence(
    stamped: FakeCluster, options: dict[str, str], expected: list[tuple[str, int, int]]
) -> None:
    options = {"subscribe": "t", "startingOffsetsByTimestampStrategy": "latest", **options}
    assert spans(plan(stamped, options)) == expected


def test_starting_timestamp_after_ending_timestamp_is_start_after_end(
    stamped: FakeCluster,
) -> None:
    with pytest.raises(ConfigurationError, match=r"t-0: start 3, end 1"):
        plan(
            stamped,
            {
                "subscribe": "t",
                "startingTimestamp": "400",
                "startingOffsetsByTimestampStrategy": "latest",
                "endingTimestamp": "200",
            },
        )


# --- splitting reaches the output ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"maxRecordsPerPartition": "4"},
            # t-0 [2, 10) has 8 → 2 parts; t-1 [0, 5) has 5 → 2 parts (2 + 3).
            [("t-0", 2, 6), ("t-0", 6, 10), ("t-1", 0, 2), ("t-1", 2, 5)],
        ),
        (
            {"minPartitions": "5"},
            # 13 offsets over 5 tasks: t-0 gets round(8/13*5) = 3, t-1 round(5/13*5) = 2.
            [("t-0", 2, 4), ("t-0", 4, 7), ("t-0", 7, 10), ("t-1", 0, 2), ("t-1", 2, 5)],
        ),
        ({"minPartitions": "2"}, [("t-0", 2, 10), ("t-1", 0, 5)]),  # already enough
        (
            {"minPartitions": "3", "startingOffsets": '{"t": {"0": 2, "1": 5}}'},
            # t-1 is empty and dropped before splitting; t-0 alone is split in 3.
            [("t-0", 2, 4), ("t-0", 4, 7), ("t-0", 7, 10)],
        ),
    ],
)
def test_splitting_options_reach_the_batch_plan(
    cluster: FakeCluster, options: dict[str, str], expected: list[tuple[str, int, int]]
) -> None:
    assert spans(plan(cluster, {"subscribe": "t", **options})) == expected


def test_empty_partitions_are_left_out(cluster: FakeCluster) -> None:
    cluster.create_topic("empty", partitions=2)
    cluster.create_topic("drained", records=4)
    cluster.age_out("drained", 0, 4)  # log start == log end: nothing left to read
    assert spans(plan(cluster, {"subscribe": "t,empty,drained"})) == [
        ("t-0", 2, 10),
        ("t-1", 0, 5),
    ]


def test_ranges_span_offset_gaps(cluster: FakeCluster) -> None:
    # Transaction markers take offsets: the range ends at the log end, not after the last record.
    cluster.gap("t", 1, 2)
    assert spans(plan(cluster, {"assign": '{"t": [1]}'})) == [("t-1", 0, 7)]


# -- startingOffsets=committed ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fallback", "expected"),
    [
        ("earliest", [("t-0", 4, 10), ("t-1", 0, 5)]),  # t-1 has no commit: from its start
        ("latest", [("t-0", 4, 10)]),  # t-1 from its end: an empty range, dropped
    ],
)
def test_committed_offsets_with_a_fallback_for_partitions_without_a_commit(
    cluster: FakeCluster, fallback: str, expected: list[tuple[str, int, int]]
) -> None:
    cluster.groups["g"] = {TopicPartition("t", 0): 4}
    options = {
        "subscribe": "t",
        "startingOffsets": "committed",
        "kafka.group.id": "g",
        "committedOffsetsFallback": fallback,
    }
    assert spans(plan(cluster, options)) == expected


def test_committed_offsets_without_a_commit_fail_by_default_naming_the_partition(
    cluster: FakeCluster,
) -> None:
    cluster.groups["g"] = {TopicPartition("t", 0): 4}
    options = {"subscribe": "t", "startingOffsets": "committed", "kafka.group.id": "g"}
    with pytest.raises(ConfigurationError, match=r"none for t-1.*committedOffsetsFallback"):
        plan(cluster, options)


def test_committed_offsets_need_a_group(cluster: FakeCluster) -> None:
    with pytest.raises(ConfigurationError, match=r"kafka\.group\.id"):
        plan(cluster, {"subscribe": "t", "startingOffsets": "committed"})


def test_committed_offset_that_aged_out_is_data_loss(cluster: FakeCluster) -> None:
    cluster.groups["g"] = {TopicPartition("t", 0): 1, TopicPartition("t", 1): 0}
    options = {"subscribe": "t", "startingOffsets": "committed", "kafka.group.id": "g"}
    with pytest.raises(DataLossError, match="t-0"):
        plan(cluster, options)
