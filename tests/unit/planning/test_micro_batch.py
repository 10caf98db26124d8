"""Unit tests for kafka_direct.planner.StreamPlanner: the micro-batch planning behind
``spark.readStream.format("kafka_direct")``, against an in-memory cluster. No broker, no Spark.

:class:`MicroBatches` drives a planner the way Spark's MicroBatchExecution drives the stream
reader (see source.py): per trigger ``latestOffset(start)``, and when the answer differs from
``start``, ``partitions(start, end)`` and a commit that makes ``end`` the next ``start``. Until a
batch has committed, ``start`` is ``initialOffset()``, asked afresh for each use (Spark's
``getStartOffset`` and ``runBatch``), and batch 0 runs even when it is empty. Offsets cross
through their JSON form, as they do between Spark and Python.
"""

from __future__ import annotations

import functools
import json
import logging
import pickle
from collections import Counter
from typing import Any

import pytest

from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError, DataLossError
from kafka_direct.offsets import (
    LATEST,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
)
from kafka_direct.planning.micro_batch import StreamPlanner
from tests.unit.fake_reader import FakeCluster, FakeOffsetReader

BOOTSTRAP = {"kafka.bootstrap.servers": "localhost:9092"}
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)

Span = tuple[str, int, int]


def stream_options(options: dict[str, str]) -> SourceOptions:
    return parse_source_options({**BOOTSTRAP, **options}, streaming=True)


def spans(ranges: list[OffsetRange]) -> list[Span]:
    """Ranges as ("t-0", from, until), the shape the expectations below are written in."""
    return [(f"{r.topic}-{r.partition}", r.from_offset, r.until_offset) for r in ranges]


def through_json(offsets: PartitionOffsets) -> PartitionOffsets:
    """What Spark hands back: the offsets after a trip through the JVM as JSON."""
    return offsets_from_json(json.loads(json.dumps(offsets_to_json(offsets))))


def records(batch: list[Span] | None) -> int:
    return sum(until - start for _, start, until in batch or [])


class ManualClock:
    """An injectable ``clock_ms``: time moves only when the test says so."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class MicroBatches:
    """A stream reader's planner, driven trigger by trigger as Spark drives it."""

    def __init__(
        self,
        cluster: FakeCluster,
        options: dict[str, str],
        *,
        clock: ManualClock | None = None,
        read_all: bool = False,
        available_now: bool = False,
    ) -> None:
        self.reader = FakeOffsetReader(cluster)
        extra: dict[str, Any] = {} if clock is None else {"clock_ms": clock}
        self.planner = StreamPlanner(stream_options(options), lambda: self.reader, **extra)
        self.read_all = read_all
        self.committed: PartitionOffsets | None = None
        if available_now:
            # Spark prepares the sources before it asks a new query for its initial offsets.
            self.planner.prepare_available_now()

    @property
    def start(self) -> PartitionOffsets:
        if self.committed is not None:
            return self.committed
        return through_json(self.planner.initial_offsets())

    @start.setter
    def start(self, offsets: PartitionOffsets) -> None:
        self.committed = offsets

    def latest(self) -> PartitionOffsets:
        return through_json(self.planner.latest_offsets(self.start, read_all=self.read_all))

    def trigger(self) -> list[Span] | None:
        """One trigger: the batch's ranges, or None when latestOffset said there is no batch."""
        end = self.latest()
        if self.committed is not None and end == self.committed:
            return None
        ranges = spans(self.planner.plan_ranges(self.start, end))
        self.committed = end
        return ranges

    def drain(self, limit: int = 50) -> list[list[Span]]:
        """Triggers until one returns no batch; the batches that ran."""
        batches: list[list[Span]] = []
        for _ in range(limit):
            batch = self.trigger()
            if batch is None:
                return batches
            batches.append(batch)
        raise AssertionError(f"still planning batches after {limit} triggers")


def covered(batches: list[list[Span]]) -> dict[str, list[tuple[int, int]]]:
    """Per partition, the offsets all batches read, merged; asserts no overlap and no gap."""
    by_tp: dict[str, list[tuple[int, int]]] = {}
    for batch in batches:
        for tp, start, until in batch:
            by_tp.setdefault(tp, []).append((start, until))
    merged: dict[str, list[tuple[int, int]]] = {}
    for tp, parts in by_tp.items():
        parts.sort()
        out = [parts[0]]
        for start, until in parts[1:]:
            assert start == out[-1][1], f"{tp}: gap or overlap at {out[-1]} then {(start, until)}"
            out[-1] = (out[-1][0], until)
        merged[tp] = out
    return merged


# --- initial offsets ------------------------------------------------------------------------------


@pytest.fixture
def stamped() -> FakeCluster:
    """t-0: offsets [3, 10) (0-2 aged out), timestamps 100, 200, ..., 1000 at offsets 0-9.
    t-1: offsets [0, 4), timestamps 150, 250, 350, 450."""
    c = FakeCluster()
    c.create_topic("t", partitions=2)
    c.append("t", 0, timestamps=range(100, 1001, 100))
    c.age_out("t", 0, 3)
    c.append("t", 1, timestamps=[150, 250, 350, 450])
    return c


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {T0: LATEST, T1: LATEST}),  # a stream starts at latest by default
        ({"startingOffsets": "latest"}, {T0: LATEST, T1: LATEST}),
        ({"startingOffsets": "earliest"}, {T0: 3, T1: 0}),
        ({"startingOffsets": '{"t": {"0": -1, "1": -2}}'}, {T0: LATEST, T1: 0}),
        ({"startingOffsets": '{"t": {"0": 5, "1": -1}}'}, {T0: 5, T1: LATEST}),
        ({"startingOffsets": '{"t": {"0": 10, "1": 4}}'}, {T0: 10, T1: 4}),
        # Timestamps depend on when they are resolved: placeholders, pinned by the first trigger.
        ({"startingTimestamp": "420"}, {T0: LATEST, T1: LATEST}),
    ],
)
def test_initial_offsets(
    stamped: FakeCluster, options: dict[str, str], expected: PartitionOffsets
) -> None:
    planner = StreamPlanner(stream_options({"subscribe": "t", **options}), stamped.reader)
    assert planner.initial_offsets() == expected


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"startingOffsets": '{"t": {"0": 5}}'}, ConfigurationError, "no entry for t-1"),
        (
            {"startingOffsets": '{"t": {"0": 5, "1": 1, "2": 0}}'},
            ConfigurationError,
            "only partitions that exist",
        ),
        ({"startingOffsets": '{"t": {"0": 5, "1": 9}}'}, ConfigurationError, "log end offset 4"),
        ({"startingOffsets": '{"t": {"0": 1, "1": 0}}'}, DataLossError, "t-0: starting offset 1"),
    ],
)
def test_a_new_query_refuses_what_batch_reads_refuse(
    stamped: FakeCluster, options: dict[str, str], error: type[Exception], match: str
) -> None:
    # Offsets are refused by initialOffset; a JSON that does not name exactly the partitions
    # there are, by the first trigger (a restart replaying batch 0 must not check it again).
    planner = StreamPlanner(stream_options({"subscribe": "t", **options}), stamped.reader)
    with pytest.raises(error, match=match):
        planner.latest_offsets(planner.initial_offsets(), read_all=False)


@pytest.mark.parametrize(
    ("options", "pinned"),
    [
        ({"startingTimestamp": "420"}, {T0: 4, T1: 3}),
        ({"startingOffsetsByTimestamp": '{"t": {"0": 0, "1": 300}}'}, {T0: 3, T1: 2}),
        (
            {"startingTimestamp": "500", "startingOffsetsByTimestampStrategy": "latest"},
            {T0: 4, T1: 4},  # t-1 has nothing at or after 500: its latest offset
        ),
    ],
)
def test_timestamp_starts_are_pinned_by_the_first_trigger_in_an_empty_batch(
    stamped: FakeCluster, options: dict[str, str], pinned: PartitionOffsets
) -> None:
    planner = StreamPlanner(stream_options({"subscribe": "t", **options}), stamped.reader)
    start = planner.initial_offsets()
    end = planner.latest_offsets(start, read_all=False)
    assert end == pinned
    assert planner.plan_ranges(start, end) == []  # batch 0 reads nothing; the log records it


def test_timestamp_start_without_a_match_fails_at_the_first_trigger(stamped: FakeCluster) -> None:
    planner = StreamPlanner(
        stream_options({"subscribe": "t", "startingTimestamp": "500"}), stamped.reader
    )
    start = planner.initial_offsets()
    with pytest.raises(ConfigurationError, match="startingOffsetsByTimestampStrategy"):
        planner.latest_offsets(start, read_all=False)


def test_committed_start_replayed_after_a_crash_in_batch_0_reads_the_logged_range() -> None:
    # Regression (review): a committed start re-resolved after a crash in batch 0 read history
    # (failOnDataLoss=false) or failed forever (true) once the group or the log had moved.
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=1, records=10)
    options = stream_options(
        {
            "subscribe": "t",
            "startingOffsets": "committed",
            "kafka.group.id": "g",
            "committedOffsetsFallback": "latest",
            "commitOffsets": "false",
        }
    )
    first_run = StreamPlanner(options, lambda: FakeOffsetReader(cluster))
    start = first_run.initial_offsets()
    logged_end = first_run.latest_offsets(start, read_all=False)  # batch 0, in the offset log
    assert logged_end == {T0: 10}
    cluster.append("t", 0, 5)  # the crash; the log moves on

    restarted = StreamPlanner(options, lambda: FakeOffsetReader(cluster))
    replay_start = restarted.initial_offsets()  # Spark re-asks: placeholders again
    assert restarted.plan_ranges(replay_start, logged_end) == []  # same empty batch 0
    next_end = restarted.latest_offsets(logged_end, read_all=False)
    assert spans(restarted.plan_ranges(logged_end, next_end)) == [("t-0", 10, 15)]


def test_initial_offset_below_log_start_starts_at_earliest_without_fail(
    stamped: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    options = {
        "subscribe": "t",
        "startingOffsets": '{"t": {"0": 1, "1": 0}}',
        "failOnDataLoss": "false",
    }
    planner = StreamPlanner(stream_options(options), stamped.reader)
    with caplog.at_level(logging.WARNING):
        assert planner.initial_offsets() == {T0: 3, T1: 0}
    assert "t-0" in caplog.text


# --- startingOffsets=latest: the pinned first batch -----------------------------------------------


def test_starting_latest_pins_the_position_in_an_empty_first_batch() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[5, 3])
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": "latest"})
    assert q.start == {T0: LATEST, T1: LATEST}

    pinned = q.latest()
    assert pinned == {T0: 5, T1: 3}
    assert q.planner.plan_ranges(q.start, pinned) == []

    # Spark has not committed batch 0 and asks again: the log grew, the answer must not move,
    # or a replayed batch 0 would disagree with the one first planned.
    cluster.append("t", 0, 4)
    assert q.latest() == pinned
    assert q.planner.plan_ranges(q.start, pinned) == []
    assert q.planner.reported_latest == {T0: 9, T1: 3}  # what the cluster really has

    # Batch 0 commits; the next trigger starts at the pinned end and reads what came since.
    q.start = pinned
    cluster.append("t", 1, 2)
    assert q.trigger() == [("t-0", 5, 9), ("t-1", 3, 5)]
    assert q.trigger() is None


def test_starting_latest_reads_nothing_produced_before_the_query_started() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(cluster, {"subscribe": "t"})
    cluster.append("t", 0, 2)  # after initialOffset, before the first trigger
    assert q.trigger() == []  # batch 0: empty, pins 7
    cluster.append("t", 0, 3)
    assert q.trigger() == [("t-0", 7, 10)]


def test_partition_added_after_the_initial_offsets_of_a_latest_query_is_read_from_earliest() -> (
    None
):
    # Regression: Spark asks initialOffset() again to plan batch 0; re-resolving it gave the
    # new partition a -1 start, so its first records were skipped.
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(cluster, {"subscribe": "t"})
    assert q.start == {T0: LATEST}  # Spark's first initialOffset() call
    cluster.add_partitions("t", 1)
    cluster.append("t", 1, 3)
    assert q.trigger() == [("t-1", 0, 3)]
    assert q.start == {T0: 5, T1: 3}


def test_json_with_a_latest_entry_pins_it_and_keeps_the_others() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[5, 3])
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": '{"t": {"0": -1, "1": 1}}'})
    assert q.trigger() == []  # the pinned batch 0 reads nothing, t-1 waits at 1
    assert q.start == {T0: 5, T1: 1}
    cluster.append("t", 0, 1)
    assert q.trigger() == [("t-0", 5, 6), ("t-1", 1, 3)]


# --- discovery ------------------------------------------------------------------------------------


@pytest.mark.parametrize("starting", ["earliest", "latest"])
def test_new_topic_matching_the_pattern_is_read_in_full(starting: str) -> None:
    cluster = FakeCluster()
    cluster.create_topic("events-a", records=3)
    cluster.create_topic("other", records=5)
    q = MicroBatches(cluster, {"subscribePattern": "events-.*", "startingOffsets": starting})
    first = q.trigger()
    assert first == ([("events-a-0", 0, 3)] if starting == "earliest" else [])

    cluster.create_topic("events-b", partitions=2, records=[4, 1])
    # Found anywhere in the name, as Spark's SubscribePatternStrategy (findFirstIn) finds it.
    cluster.create_topic("old-events-c", records=5)
    cluster.create_topic("events", records=1)  # no "events-" in it
    cluster.append("events-a", 0, 2)
    assert q.trigger() == [
        ("events-a-0", 3, 5),
        ("events-b-0", 0, 4),
        ("events-b-1", 0, 1),
        ("old-events-c-0", 0, 5),
    ]
    assert q.trigger() is None


def test_an_assigned_partition_created_while_running_is_read_from_its_start() -> None:
    """Spark's AssignStrategy keeps the assigned partitions the topic has: t-1 is left out until
    it is created, then read in full, as a new partition is."""
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    q = MicroBatches(cluster, {"assign": '{"t": [0, 1]}', "startingOffsets": "earliest"})
    assert q.trigger() == [("t-0", 0, 3)]
    cluster.add_partitions("t")
    cluster.append("t", 1, 4)
    assert q.trigger() == [("t-1", 0, 4)]


def test_new_partition_of_a_subscribed_topic_starts_at_earliest() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(cluster, {"subscribe": "t"})  # latest
    assert q.trigger() == []
    cluster.add_partitions("t", 2)
    cluster.append("t", 0, 2)
    cluster.append("t", 1, 3)
    assert q.trigger() == [("t-0", 5, 7), ("t-1", 0, 3)]
    assert q.start == {T0: 7, T1: 3, T2: 0}  # the empty new partition is tracked too
    cluster.append("t", 2, 1)
    assert q.trigger() == [("t-2", 0, 1)]


@pytest.mark.parametrize("fail", ["true", "false"])
def test_new_partition_whose_first_records_aged_out_is_data_loss_as_in_spark(
    caplog: pytest.LogCaptureFixture, fail: str
) -> None:
    """Spark's rule (getOffsetRangesFromResolvedOffsets): an added partition that does not start
    at 0 is reported as data loss, so failOnDataLoss decides. The structured source used to only
    warn; the DStream API followed the policy. Both now follow Spark."""
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(
        cluster, {"subscribe": "t", "startingOffsets": "earliest", "failOnDataLoss": fail}
    )
    assert q.trigger() == [("t-0", 0, 5)]
    cluster.add_partitions("t")
    cluster.append("t", 1, 6)
    cluster.age_out("t", 1, 2)
    if fail == "true":
        with pytest.raises(DataLossError, match="t-1 starts from 2 instead of 0"):
            q.trigger()
        return
    with caplog.at_level(logging.WARNING):
        assert q.trigger() == [("t-1", 2, 6)]
    assert "t-1 starts from 2 instead of 0" in caplog.text


@pytest.mark.parametrize("starting", ["earliest", "latest"])
def test_subscribed_topic_created_after_the_query_started_is_read_from_earliest(
    starting: str,
) -> None:
    cluster = FakeCluster()
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": starting})
    assert q.start == {}  # a stream waits for the topic; only a batch read calls it a typo
    assert q.trigger() == []  # batch 0 runs, empty
    assert q.trigger() is None
    cluster.create_topic("t", records=3)
    assert q.trigger() == [("t-0", 0, 3)]


def test_topic_created_while_batch_0_is_planned_is_not_data_loss() -> None:
    # Regression: runBatch's second initialOffset() call saw the new topic at earliest, while
    # batch 0's end (from latestOffset) did not have it: "t-0 is gone", a DataLossError.
    cluster = FakeCluster()
    opts = stream_options({"subscribe": "t", "startingOffsets": "earliest"})
    planner = StreamPlanner(opts, cluster.reader)
    end = planner.latest_offsets(planner.initial_offsets(), read_all=False)
    assert end == {}
    cluster.create_topic("t", records=3)
    assert planner.plan_ranges(planner.initial_offsets(), end) == []
    assert spans(planner.plan_ranges(end, planner.latest_offsets(end, read_all=False))) == [
        ("t-0", 0, 3)
    ]


def test_initial_offsets_are_resolved_once() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    reader = FakeOffsetReader(cluster)
    opts = stream_options({"subscribe": "t", "startingOffsets": "earliest"})
    planner = StreamPlanner(opts, lambda: reader)
    first = planner.initial_offsets()
    cluster.age_out("t", 0, 2)
    cluster.add_partitions("t")
    assert planner.initial_offsets() == first == {T0: 0}
    assert (reader.calls["partitions"], reader.calls["earliest"]) == (1, 1)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"maxOffsetsPerTrigger": "3"},
        {"maxOffsetsPerPartitionPerTrigger": "1"},
        {"minOffsetsPerTrigger": "4"},
        {"minPartitions": "7"},
    ],
)
def test_one_latest_request_per_trigger_for_all_partitions(options: dict[str, str]) -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=3, records=[5, 3, 1])
    cluster.create_topic("u", records=2)
    q = MicroBatches(
        cluster, {"subscribe": "t,u", "startingOffsets": "earliest", **options}, clock=ManualClock()
    )
    assert q.reader.calls["latest"] == 0
    batches = 0
    for n in range(1, 5):
        batches += q.trigger() is not None
        cluster.append("u", 0, 1)
        assert q.reader.calls["latest"] == n
        assert q.reader.calls["partitions"] == n + 1  # initialOffset, then one per trigger
    every = sorted([T0, T1, T2, TopicPartition("u", 0)])
    assert [arg for method, arg in q.reader.log if method == "latest"] == [every] * 4
    # initialOffset, then one per batch: the data-loss check against the log start (no
    # partition was new).
    assert q.reader.calls["earliest"] == 1 + batches
    assert q.reader.calls["for_timestamps"] == 0


# --- data loss ------------------------------------------------------------------------------------


#: The query of :func:`two_topics`.
TWO_TOPICS = {"subscribe": "t,u", "startingOffsets": "earliest"}


def two_topics(fail_on_data_loss: str) -> tuple[FakeCluster, MicroBatches]:
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    cluster.create_topic("u", records=4)
    q = MicroBatches(cluster, {**TWO_TOPICS, "failOnDataLoss": fail_on_data_loss})
    assert q.trigger() == [("t-0", 0, 3), ("u-0", 0, 4)]
    return cluster, q


def test_deleted_topic_is_data_loss() -> None:
    cluster, q = two_topics("true")
    cluster.delete_topic("u")
    cluster.append("t", 0, 2)
    end = q.latest()
    assert end == {T0: 5}
    with pytest.raises(DataLossError, match=r"u-0 is gone \(offset 4 was expected\)") as err:
        q.planner.plan_ranges(q.start, end)
    assert (err.value.topic, err.value.partition) == ("u", 0)


def test_deleted_topic_is_dropped_with_a_warning_without_fail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, q = two_topics("false")
    cluster.delete_topic("u")
    cluster.append("t", 0, 2)
    with caplog.at_level(logging.WARNING):
        assert q.trigger() == [("t-0", 3, 5)]
    assert "u-0" in caplog.text
    assert "failOnDataLoss=false" in caplog.text
    assert q.start == {T0: 5}
    cluster.append("t", 0, 1)
    assert q.trigger() == [("t-0", 5, 6)]


def test_recreated_topic_with_fewer_records_is_data_loss() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=10)
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": "earliest"})
    assert q.trigger() == [("t-0", 0, 10)]
    cluster.recreate_topic("t", records=3)
    end = q.latest()
    with pytest.raises(DataLossError, match=r"t-0.*changed from 10 to 3") as err:
        q.planner.plan_ranges(q.start, end)
    assert (err.value.topic, err.value.partition) == ("t", 0)
    assert "failOnDataLoss" in str(err.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [[("t-0", 0, 3)], [("t-0", 3, 5)]]),
        # Rate-limited, the new log is read from its start in exact, contiguous steps.
        ({"maxOffsetsPerTrigger": "2"}, [[("t-0", 0, 2)], [("t-0", 2, 4)], [("t-0", 4, 5)]]),
    ],
)
def test_recreated_topic_continues_from_the_new_log_start_without_fail(
    options: dict[str, str], expected: list[list[Span]], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=10)
    q = MicroBatches(
        cluster,
        {"subscribe": "t", "startingOffsets": "earliest", "failOnDataLoss": "false", **options},
        read_all=True,
    )
    assert q.trigger() == [("t-0", 0, 10)]
    q.read_all = False
    cluster.recreate_topic("t", records=3)
    with caplog.at_level(logging.WARNING):
        first = q.trigger()
    assert "t-0" in caplog.text
    assert "changed from 10 to" in caplog.text
    cluster.append("t", 0, 2)
    assert [first, *q.drain()] == expected


def test_replayed_data_loss_batch_plans_the_same_ranges() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=10)
    options = {"subscribe": "t", "startingOffsets": "earliest", "failOnDataLoss": "false"}
    q = MicroBatches(cluster, options)
    q.trigger()
    cluster.recreate_topic("t", records=3)
    end = q.latest()
    first = q.planner.plan_ranges(q.start, end)
    assert spans(first) == [("t-0", 0, 3)]
    assert q.planner.plan_ranges(q.start, end) == first


# --- admission control ----------------------------------------------------------------------------


def three_partitions() -> FakeCluster:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=3, records=[20, 7, 3])
    return cluster


@pytest.mark.parametrize(
    ("limit", "sizes"),
    [
        # KafkaMicroBatchStream.rateLimit on backlogs 20, 7, 3: floored shares, and shares
        # below one record lifted to one. These are Spark's own end offsets, batch for batch.
        ("10", [9, 9, 9, 3]),
        ("1", [3, 3, 3, 2, 2, 2, 2] + [1] * 13),
        ("4", [4, 4, 4, 4, 4, 4, 4, 2]),
        ("29", [27, 3]),
    ],
)
def test_max_offsets_per_trigger_follows_spark_rate_limit(limit: str, sizes: list[int]) -> None:
    q = MicroBatches(
        three_partitions(),
        {"subscribe": "t", "startingOffsets": "earliest", "maxOffsetsPerTrigger": limit},
    )
    batches = q.drain()
    assert [records(b) for b in batches] == sizes
    assert covered(batches) == {"t-0": [(0, 20)], "t-1": [(0, 7)], "t-2": [(0, 3)]}


@pytest.mark.parametrize(
    "options",
    [
        {"maxOffsetsPerTrigger": "10"},
        {"maxOffsetsPerPartitionPerTrigger": "2"},
        {"maxOffsetsPerTrigger": "5", "maxOffsetsPerPartitionPerTrigger": "1"},
    ],
)
def test_read_all_available_ignores_the_limits(options: dict[str, str]) -> None:
    q = MicroBatches(
        three_partitions(),
        {"subscribe": "t", "startingOffsets": "earliest", **options},
        read_all=True,
    )
    assert q.drain() == [[("t-0", 0, 20), ("t-1", 0, 7), ("t-2", 0, 3)]]


def test_max_offsets_per_partition_per_trigger_caps_each_partition() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[10, 2])
    q = MicroBatches(
        cluster,
        {"subscribe": "t", "startingOffsets": "earliest", "maxOffsetsPerPartitionPerTrigger": "4"},
    )
    assert q.drain() == [
        [("t-0", 0, 4), ("t-1", 0, 2)],
        [("t-0", 4, 8)],
        [("t-0", 8, 10)],
    ]


def test_per_partition_cap_and_total_limit_together() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=3, records=[10, 10, 1])
    options = {
        "subscribe": "t",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "7",
        "maxOffsetsPerPartitionPerTrigger": "3",
    }
    q = MicroBatches(cluster, options)
    batches = q.drain()
    assert [records(b) for b in batches] == [7, 6, 6, 2]
    for batch in batches:
        assert all(until - start <= 3 for _, start, until in batch)
    assert covered(batches) == {"t-0": [(0, 10)], "t-1": [(0, 10)], "t-2": [(0, 1)]}


def test_new_partitions_share_the_rate_limit() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=4)
    q = MicroBatches(
        cluster, {"subscribe": "t", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    )
    assert q.trigger() == [("t-0", 0, 4)]
    cluster.add_partitions("t")
    cluster.append("t", 0, 4)
    cluster.append("t", 1, 4)
    assert q.trigger() == [("t-0", 4, 6), ("t-1", 0, 2)]


def test_min_offsets_per_trigger_waits_until_the_minimum_or_the_delay() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    clock = ManualClock()
    options = {
        "subscribe": "t",
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "30s",
    }
    q = MicroBatches(cluster, options, clock=clock)
    # Spark's lastTriggerMillis starts at 0: the first batch runs below the minimum.
    assert q.trigger() == [("t-0", 0, 3)]

    cluster.append("t", 0, 4)
    clock.advance(1_000)
    start = dict(q.start)
    assert q.planner.latest_offsets(q.start, read_all=False) == start  # 4 < 10: wait
    assert q.planner.reported_latest == {T0: 7}

    cluster.append("t", 0, 6)  # 10 waiting: the minimum is reached before the delay
    assert q.trigger() == [("t-0", 3, 13)]

    cluster.append("t", 0, 2)
    clock.advance(29_999)
    assert q.trigger() is None
    clock.advance(1)  # 30 s since the last batch ran
    assert q.trigger() == [("t-0", 13, 15)]

    clock.advance(60_000)  # the delay has passed, but there is nothing to read
    assert q.trigger() is None

    # As Spark's delayBatch, that idle trigger restarted the delay: a small backlog now waits.
    cluster.append("t", 0, 2)
    clock.advance(1_000)
    assert q.trigger() is None
    clock.advance(29_000)
    assert q.trigger() == [("t-0", 15, 17)]


def test_min_offsets_per_trigger_after_the_pinned_batch_0_waits_for_the_minimum() -> None:
    # Regression (review): the pinning trigger did not start the delay, so the next trigger ran
    # an undersized batch. In Spark, batch 0 is the trigger that passes delayBatch.
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    clock = ManualClock()
    options = {"subscribe": "t", "minOffsetsPerTrigger": "1000", "maxTriggerDelay": "15m"}
    q = MicroBatches(cluster, options, clock=clock)
    assert q.trigger() == []  # batch 0 pins 5
    cluster.append("t", 0, 1)
    clock.advance(1_000)
    assert q.trigger() is None  # 1 < 1000, 1 s < 15 min
    clock.advance(15 * 60_000 - 1_000)
    assert q.trigger() == [("t-0", 5, 6)]


def test_latest_placeholder_missing_from_the_logged_end_is_not_data_loss() -> None:
    # A restart in batch 0 re-resolves "latest" placeholders; a partition created meanwhile is
    # in the new start but not in the end logged before the crash. Nothing of it was planned.
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[4, 4])
    planner = StreamPlanner(
        stream_options({"subscribe": "t", "startingOffsets": "latest"}),
        lambda: FakeOffsetReader(cluster),
    )
    start = {T0: LATEST, TopicPartition("t", 1): LATEST}
    logged_end = {T0: 4}
    assert spans(planner.plan_ranges(start, logged_end)) == []


#: How a new partition comes while the driver is down: a partition of the subscribed topic, or
#: a topic matching the pattern.
RESTART_IN_BATCH_0 = [
    pytest.param({"subscribe": "t", "startingOffsets": "earliest"}, "t-1", id="earliest"),
    pytest.param({"subscribe": "t", "startingOffsets": '{"t": {"0": 0}}'}, "t-1", id="json"),
    pytest.param({"subscribePattern": "t.*", "startingOffsets": "earliest"}, "tx-0", id="pattern"),
    pytest.param({"assign": '{"t": [0, 1]}', "startingOffsets": "earliest"}, "t-1", id="assign"),
]


def _added_while_down(cluster: FakeCluster, options: dict[str, str]) -> None:
    if "subscribePattern" in options:
        cluster.create_topic("tx", records=3)
    else:
        cluster.add_partitions("t")
        cluster.append("t", 1, 3)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
@pytest.mark.parametrize(("options", "added"), RESTART_IN_BATCH_0)
def test_a_restart_in_batch_0_after_partitions_were_added_replays_the_logged_batch(
    caplog: pytest.LogCaptureFixture, options: dict[str, str], added: str, fail_on_data_loss: str
) -> None:
    # Regression (review): the replay re-resolved the start with the new partition in it, which
    # the logged end lacks: "t-1 is gone" (DataLossError) on every restart, a ConfigurationError
    # for the JSON ("no entry for t-1"), or a false warning with failOnDataLoss=false.
    options = {**options, "failOnDataLoss": fail_on_data_loss}
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    first_run = MicroBatches(cluster, options)
    logged_end = first_run.latest()  # batch 0 in the offset log; the driver dies
    assert logged_end == {T0: 5}
    _added_while_down(cluster, options)
    cluster.append("t", 0, 2)

    restarted = MicroBatches(cluster, options)  # Spark replays batch 0 from initialOffset()
    with caplog.at_level(logging.WARNING):
        assert spans(restarted.planner.plan_ranges(restarted.start, logged_end)) == [("t-0", 0, 5)]
        restarted.start = logged_end  # batch 0 commits
        assert restarted.trigger() == [("t-0", 5, 7), (added, 0, 3)]  # from its earliest
    assert "Data loss" not in caplog.text


def test_a_partition_gone_before_the_first_trigger_of_a_new_query_is_still_data_loss() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    cluster.create_topic("u", records=4)
    q = MicroBatches(cluster, TWO_TOPICS)
    assert q.start == {T0: 0, TopicPartition("u", 0): 0}
    cluster.delete_topic("u")  # between initialOffset and the first latestOffset
    with pytest.raises(DataLossError, match=r"u-0 is gone \(offset 0 was expected\)"):
        q.trigger()


def test_a_json_start_of_an_empty_batch_0_is_not_checked_again_after_a_restart() -> None:
    # Batch 0 read nothing (end == start); the restart's first trigger starts at that end, which
    # equals the start resolved again: it is not a new query, the JSON is not refused.
    cluster = FakeCluster()
    cluster.create_topic("t")
    options = {"subscribe": "t", "startingOffsets": '{"t": {"0": 0}}'}
    logged_end = MicroBatches(cluster, options).latest()
    assert logged_end == {T0: 0}
    cluster.add_partitions("t")
    cluster.append("t", 1, 2)
    restarted = MicroBatches(cluster, options)
    assert restarted.planner.plan_ranges(restarted.start, logged_end) == []
    restarted.start = logged_end
    assert restarted.trigger() == [("t-1", 0, 2)]


def test_a_json_start_replayed_after_its_records_aged_out_is_data_loss() -> None:
    # Retention moved the log start while the driver was down in batch 0: a JSON start is
    # resolved again, and below the log start it is data loss, as in Spark, whose replay reads
    # the start from its checkpoint and finds it out of range.
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    options = {"subscribe": "t", "startingOffsets": '{"t": {"0": 1}}'}
    logged_end = MicroBatches(cluster, options).latest()
    cluster.age_out("t", 0, 3)
    with pytest.raises(DataLossError, match="starting offset 1 is before"):
        MicroBatches(cluster, options).start  # noqa: B018 (Spark's initialOffset() call)
    lenient = MicroBatches(cluster, {**options, "failOnDataLoss": "false"})
    assert spans(lenient.planner.plan_ranges(lenient.start, logged_end)) == [("t-0", 3, 5)]


def test_min_offsets_per_trigger_is_ignored_when_reading_all_available() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    options = {"subscribe": "t", "startingOffsets": "earliest", "minOffsetsPerTrigger": "10"}
    q = MicroBatches(cluster, options, clock=ManualClock(), read_all=True)
    assert q.trigger() == [("t-0", 0, 3)]
    cluster.append("t", 0, 1)
    assert q.trigger() == [("t-0", 3, 4)]


# --- Trigger.AvailableNow -------------------------------------------------------------------------


def test_available_now_reads_up_to_the_target_and_stops() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[6, 4])
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": "earliest"}, available_now=True)
    cluster.append("t", 0, 5)  # after the target was fixed
    cluster.add_partitions("t")
    cluster.append("t", 2, 3)
    assert q.drain() == [[("t-0", 0, 6), ("t-1", 0, 4)]]
    assert q.reader.calls["latest"] == 1  # the target; no trigger asks again
    assert q.planner.reported_latest == {T0: 6, T1: 4}


def test_available_now_topic_created_before_the_initial_offsets_waits_for_the_next_run() -> None:
    # Regression: Spark calls prepareForTriggerAvailableNow before initialOffset. A topic created
    # in between was in the initial offsets but not in the target: "events-b-0 is gone".
    cluster = FakeCluster()
    cluster.create_topic("events-a", records=3)
    options = {"subscribePattern": "events-.*", "startingOffsets": "earliest"}
    q = MicroBatches(cluster, options, available_now=True)
    cluster.create_topic("events-b", records=2)
    assert q.drain() == [[("events-a-0", 0, 3)]]

    next_run = MicroBatches(cluster, options, available_now=True)
    next_run.start = q.start  # restarted from the checkpoint
    assert next_run.drain() == [[("events-b-0", 0, 2)]]


def test_available_now_with_max_offsets_takes_several_batches() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[6, 4])
    options = {"subscribe": "t", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    q = MicroBatches(cluster, options, available_now=True)
    cluster.append("t", 1, 10)
    batches = q.drain()
    assert [records(b) for b in batches] == [3, 3, 4]  # Spark floors: 2+1, 2+1, then the 2+2 left
    assert covered(batches) == {"t-0": [(0, 6)], "t-1": [(0, 4)]}
    assert q.planner.latest_offsets(q.start, read_all=False) == q.start  # done


def test_available_now_reads_up_to_the_target_despite_min_offsets_per_trigger() -> None:
    # Regression: the minimum gate held back the tail (2 < 3) and returned start, which ends an
    # AvailableNow run with data before the target unread. PySpark leaves it to the source to
    # reach the target (SupportsTriggerAvailableNow, ReadMinRows).
    cluster = FakeCluster()
    cluster.create_topic("t", records=10)
    options = {
        "subscribe": "t",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "4",
        "minOffsetsPerTrigger": "3",
    }
    q = MicroBatches(cluster, options, clock=ManualClock(), available_now=True)
    assert q.drain() == [[("t-0", 0, 4)], [("t-0", 4, 8)], [("t-0", 8, 10)]]


def test_available_now_from_latest_reads_nothing() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(cluster, {"subscribe": "t"}, available_now=True)
    cluster.append("t", 0, 3)
    assert q.drain() == [[]]  # only the pinned, empty batch 0
    assert q.start == {T0: 5}


def test_available_now_reads_partitions_that_appeared_before_the_target() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=2)
    q = MicroBatches(cluster, {"subscribe": "t", "startingOffsets": "earliest"})
    assert q.trigger() == [("t-0", 0, 2)]
    cluster.add_partitions("t")
    cluster.append("t", 1, 3)
    q.planner.prepare_available_now()
    cluster.append("t", 1, 3)
    assert q.drain() == [[("t-1", 0, 3)]]


# --- determinism, reporting, pickling -------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"minPartitions": "5"}, {"maxRecordsPerPartition": "3"}])
def test_a_replayed_batch_plans_identical_ranges(options: dict[str, str]) -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[10, 3])
    all_options = {"subscribePattern": "t.*", "startingOffsets": "earliest", **options}
    q = MicroBatches(cluster, all_options)
    cluster.create_topic("t-new", records=4)  # new: its ranges start from earliest
    start, end = q.start, q.latest()
    first = q.planner.plan_ranges(start, end)
    assert len(first) >= (5 if options.get("minPartitions") else 3)
    assert q.planner.plan_ranges(start, end) == first
    # A driver restarted from the checkpoint replays the batch with a new planner.
    fresh = StreamPlanner(stream_options(all_options), cluster.reader)
    assert fresh.plan_ranges(start, end) == first


def test_a_replayed_pinned_first_batch_is_empty_again() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", records=5)
    q = MicroBatches(cluster, {"subscribe": "t"})
    end = q.latest()
    cluster.append("t", 0, 5)
    fresh = StreamPlanner(stream_options({"subscribe": "t"}), cluster.reader)
    assert fresh.plan_ranges(fresh.initial_offsets(), end) == []


def test_reported_latest_is_the_last_triggers_latest_offsets() -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[10, 1])
    options = {"subscribe": "t", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "2"}
    q = MicroBatches(cluster, options)
    assert q.planner.reported_latest is None
    q.trigger()
    assert q.planner.reported_latest == {T0: 10, T1: 1}  # not the rate-limited end
    cluster.append("t", 1, 5)
    q.trigger()
    assert q.planner.reported_latest == {T0: 10, T1: 6}


# A reader factory that pickles by reference, so a planner and its unpickled copy share a cluster.
CLUSTERS: dict[str, FakeCluster] = {}
FACTORY_CALLS: Counter[str] = Counter()


def registered_reader(name: str) -> FakeOffsetReader:
    FACTORY_CALLS[name] += 1
    return FakeOffsetReader(CLUSTERS[name])


def test_planner_pickles_without_its_reader_and_recreates_it_lazily() -> None:
    name = "pickle"
    CLUSTERS[name] = cluster = FakeCluster()
    FACTORY_CALLS[name] = 0
    cluster.create_topic("t", records=5)
    planner = StreamPlanner(
        stream_options({"subscribe": "t"}), functools.partial(registered_reader, name)
    )
    assert FACTORY_CALLS[name] == 0  # nothing is opened in __init__
    start = planner.initial_offsets()
    pinned = planner.latest_offsets(start, read_all=False)
    assert FACTORY_CALLS[name] == 1
    reader = planner.reader
    assert isinstance(reader, FakeOffsetReader)

    # FakeOffsetReader refuses to pickle: this only works if the planner leaves it out.
    clone = pickle.loads(pickle.dumps(planner))
    assert planner.reader is reader  # pickling did not disturb the original
    cluster.append("t", 0, 3)
    assert clone.latest_offsets(start, read_all=False) == pinned  # state travels
    assert FACTORY_CALLS[name] == 2  # the copy built its own reader, on first use
    assert clone.plan_ranges(pinned, clone.latest_offsets(pinned, read_all=False)) == [
        OffsetRange("t", 0, 5, 8)
    ]

    planner.close()
    assert reader.closed
    assert planner.latest_offsets(pinned, read_all=False) == {T0: 8}
    assert FACTORY_CALLS[name] == 3
    del CLUSTERS[name]


def test_a_planner_holding_a_refused_json_start_pickles() -> None:
    # The refusal waits for the first trigger (a restart replaying batch 0 never raises it); the
    # planner is pickled to executors meanwhile, and such an exception does not unpickle.
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=3)
    planner = StreamPlanner(
        stream_options({"subscribe": "t", "startingOffsets": '{"t": {"0": 1}}'}), cluster.reader
    )
    assert planner.initial_offsets() == {T0: 1}
    pickle.loads(pickle.dumps(planner))
    with pytest.raises(ConfigurationError, match="no entry for t-1"):
        planner.latest_offsets(planner.initial_offsets(), read_all=False)


@pytest.mark.parametrize(("fail", "raises"), [("true", True), ("false", False)])
def test_assigned_topic_deleted_while_running_goes_through_fail_on_data_loss(
    fail: str, raises: bool
) -> None:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=1, records=5)
    cluster.create_topic("u", partitions=1, records=3)
    q = MicroBatches(
        cluster,
        {
            "assign": json.dumps({"t": [0], "u": [0]}),
            "startingOffsets": "earliest",
            "failOnDataLoss": fail,
        },
    )
    assert q.trigger() == [("t-0", 0, 5), ("u-0", 0, 3)]
    cluster.delete_topic("u")
    if raises:
        with pytest.raises(DataLossError, match="u-0"):
            q.trigger()
    else:
        cluster.append("t", 0, 2)
        assert q.trigger() == [("t-0", 5, 7)]
