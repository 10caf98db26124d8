"""The direct stream's strategies, starting offsets and batch planning, on a fake cluster.

No broker, no Spark: kafka_direct.strategies and kafka_direct.direct_planner.DirectStreamPlanner
against tests.unit.fake_reader.FakeCluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from kafka_direct.dstream.planner import DirectStreamPlanner
from kafka_direct.dstream.strategies import (
    ConsumerStrategies,
    ConsumerStrategy,
    LocationStrategies,
    warn_if_ignored,
)
from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    TopicNotFoundError,
    UnsupportedKafkaOptionError,
)
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from tests.unit.fake_reader import FakeCluster

P = {"bootstrap.servers": "b:9092", "group.id": "g"}
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


# --- kafkaParams ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "option", "fragment"),
    [
        pytest.param({"group.id": "g"}, "bootstrap.servers", "host1:9092", id="no bootstrap"),
        pytest.param(
            {"bootstrap.servers": " ", "group.id": "g"}, "bootstrap.servers", "", id="blank"
        ),
        pytest.param({"bootstrap.servers": "b"}, "group.id", "commitAsync", id="no group"),
        pytest.param(
            {**P, "enable.auto.commit": "true"},
            "enable.auto.commit",
            "before your function",
            id="auto commit",
        ),
        pytest.param(
            {**P, "enable.auto.commit": True},
            "enable.auto.commit",
            "Remove the key",
            id="auto commit as a Scala-style boolean",
        ),
        pytest.param(
            {**P, "auto.offset.reset": "smallestt"},
            "auto.offset.reset",
            "'earliest', 'latest'",
            id="bad reset",
        ),
        pytest.param(
            {**P, "isolation.level": "committed"},
            "isolation.level",
            "read_committed",
            id="bad isolation",
        ),
    ],
)
def test_params_are_validated_with_the_key_and_the_fix(
    params: dict[str, object], option: str, fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        ConsumerStrategies.Subscribe(["t"], params)
    assert info.value.option == option
    assert fragment in str(info.value)


def test_keys_the_source_owns_are_refused_with_their_replacement() -> None:
    with pytest.raises(UnsupportedKafkaOptionError, match="binary") as info:
        ConsumerStrategies.Subscribe(["t"], {**P, "value.deserializer": "StringDeserializer"})
    assert info.value.option == "value.deserializer"


def test_params_accept_scala_style_values_and_keep_group_and_reset_out_of_client_config() -> None:
    s = ConsumerStrategies.Subscribe(
        "t, u",
        {
            **P,
            "enable.auto.commit": False,
            "auto.offset.reset": "smallest",
            "fetch.min.bytes": 1,
            "sasl.password": "hunter2",
        },
    )
    assert s.subscription.topics == ("t", "u")
    assert s.group_id == "g"
    assert s.auto_offset_reset == "earliest"  # librdkafka's alias
    assert dict(s.kafka) == {
        "bootstrap.servers": "b:9092",
        "fetch.min.bytes": "1",
        "sasl.password": "hunter2",
    }
    assert "hunter2" not in repr(s)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("earliest", "earliest"),
        ("beginning", "earliest"),
        ("LATEST", "latest"),
        ("largest", "latest"),
        ("none", "none"),
        ("error", "none"),
    ],
)
def test_auto_offset_reset_spellings(value: str, expected: str) -> None:
    s = ConsumerStrategies.Assign([("t", 0)], {**P, "auto.offset.reset": value})
    assert s.auto_offset_reset == expected


def test_auto_offset_reset_defaults_to_latest_as_in_kafka() -> None:
    assert ConsumerStrategies.Subscribe(["t"], P).auto_offset_reset == "latest"


# --- strategies -----------------------------------------------------------------------------------


def test_subscribe_needs_topics() -> None:
    with pytest.raises(ConfigurationError, match="non-empty list of topic"):
        ConsumerStrategies.Subscribe([], P)


def test_pattern_must_compile_and_not_be_empty() -> None:
    with pytest.raises(ConfigurationError, match="valid regular expression"):
        ConsumerStrategies.SubscribePattern("events-(", P)
    with pytest.raises(ConfigurationError, match="non-empty"):
        ConsumerStrategies.SubscribePattern("", P)
    s = ConsumerStrategies.SubscribePattern(re.compile("ev.*"), P)
    assert s.subscription.pattern == "ev.*"


def test_assign_takes_topic_partitions_or_pairs() -> None:
    s = ConsumerStrategies.Assign([("t", 1), TopicPartition("t", 0), ("t", 1)], P)
    assert s.subscription.partitions == (T0, T1)
    with pytest.raises(ConfigurationError, match="partition >= 0"):
        ConsumerStrategies.Assign([("t", -1)], P)
    with pytest.raises(ConfigurationError, match="non-empty"):
        ConsumerStrategies.Assign([], P)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda o: ConsumerStrategies.Subscribe(["t"], P, o), id="subscribe"),
        pytest.param(lambda o: ConsumerStrategies.SubscribePattern("t", P, o), id="pattern"),
        pytest.param(lambda o: ConsumerStrategies.Assign([T0], P, o), id="assign"),
    ],
)
def test_offsets_must_belong_to_the_strategy(make: Callable[[dict], ConsumerStrategy]) -> None:
    assert make({T0: 5}).offsets == {T0: 5}
    with pytest.raises(ConfigurationError, match="only partitions of") as info:
        make({TopicPartition("other", 0): 5})
    assert info.value.option == "offsets"
    with pytest.raises(ConfigurationError, match="offset >= 0"):
        make({T0: -2})


def test_location_strategies_are_accepted_and_prefer_fixed_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import kafka_direct.dstream.strategies as strategies

    strategies._warned_fixed.clear()
    fixed = LocationStrategies.PreferFixed({("t", 0): "host1"})
    assert fixed.host_map == {T0: "host1"}
    assert LocationStrategies.PreferConsistent().kind == "PreferConsistent"
    assert LocationStrategies.PreferBrokers().kind == "PreferBrokers"
    with caplog.at_level(logging.WARNING, logger="kafka_direct.dstream.strategies"):
        warn_if_ignored(fixed)
        warn_if_ignored(fixed)
    warnings = [r for r in caplog.records if "PreferFixed" in r.getMessage()]
    assert len(warnings) == 1
    assert "PreferConsistent" in warnings[0].getMessage()
    with pytest.raises(ConfigurationError, match="host name"):
        LocationStrategies.PreferFixed({("t", 0): ""})


# --- starting offsets: given > stored > auto.offset.reset -----------------------------------------


@pytest.fixture()
def cluster() -> FakeCluster:
    c = FakeCluster()
    c.create_topic("t", partitions=2, records=[10, 20])
    return c


def _start(
    cluster: FakeCluster,
    strategy: ConsumerStrategy,
    stored: PartitionOffsets | None = None,
    *,
    fail_on_data_loss: bool = True,
) -> PartitionOffsets:
    return planner(
        cluster, strategy, stored=stored, fail_on_data_loss=fail_on_data_loss
    ).initial_offsets()


def test_start_precedence_given_then_stored_then_reset(cluster: FakeCluster) -> None:
    cluster.create_topic("u", partitions=1, records=30)
    u0 = TopicPartition("u", 0)
    s = ConsumerStrategies.Subscribe(["t", "u"], {**P, "auto.offset.reset": "earliest"}, {T0: 3})
    start = _start(cluster, s, {T0: 7, T1: 4})
    assert start == {T0: 3, T1: 4, u0: 0}


def test_start_latest_reset(cluster: FakeCluster) -> None:
    s = ConsumerStrategies.Subscribe(["t"], P)
    assert _start(cluster, s) == {T0: 10, T1: 20}


def test_start_reset_none_names_the_partitions_without_offsets(cluster: FakeCluster) -> None:
    s = ConsumerStrategies.Subscribe(["t"], {**P, "auto.offset.reset": "none"})
    with pytest.raises(ConfigurationError, match="none for t-1") as info:
        _start(cluster, s, {T0: 1})
    assert info.value.option == "auto.offset.reset"
    assert "group 'g'" in str(info.value)
    # With every partition stored or given, 'none' is fine.
    assert _start(cluster, s, {T0: 1, T1: 2}) == {T0: 1, T1: 2}


def test_start_below_earliest_is_data_loss(cluster: FakeCluster) -> None:
    cluster.age_out("t", 0, 6)
    s = ConsumerStrategies.Subscribe(["t"], P)
    with pytest.raises(DataLossError, match="t-0"):
        _start(cluster, s, {T0: 2, T1: 0})
    assert _start(cluster, s, {T0: 2, T1: 0}, fail_on_data_loss=False) == {T0: 6, T1: 0}


@pytest.mark.parametrize(
    ("pattern", "topics"),
    [
        # Spark Streaming's SubscribePattern: KafkaConsumer.subscribe(Pattern) keeps a topic
        # when matcher(name).matches(), the whole name (the structured source's
        # subscribePattern finds the pattern anywhere, as Spark's does).
        ("orders", ["orders"]),
        ("orders.*", ["orders", "orders-eu"]),
        (".*orders", ["legacy-orders", "orders"]),
    ],
)
def test_subscribe_pattern_matches_whole_names_as_spark_streaming(
    cluster: FakeCluster, pattern: str, topics: list[str]
) -> None:
    for name in ("orders", "orders-eu", "legacy-orders"):
        cluster.create_topic(name, records=1)
    strategy = ConsumerStrategies.SubscribePattern(pattern, {**P, "auto.offset.reset": "earliest"})
    assert sorted({tp.topic for tp in _start(cluster, strategy)}) == topics


@pytest.mark.parametrize(
    ("pattern", "topics"),
    [
        # Regression (review): only .pattern was kept, so re.I was dropped without a word.
        (re.compile("orders.*", re.IGNORECASE), ["ORDERS-us", "orders", "orders-eu"]),
        (re.compile("orders # the plain one", re.VERBOSE), ["orders"]),
        (re.compile("orders.*"), ["orders", "orders-eu"]),
        ("(?i)orders", ["orders"]),  # not ORDERS-us: the whole name must match
    ],
)
def test_a_compiled_patterns_flags_are_kept(
    cluster: FakeCluster, pattern: str | re.Pattern[str], topics: list[str]
) -> None:
    for name in ("orders", "orders-eu", "ORDERS-us"):
        cluster.create_topic(name, records=1)
    strategy = ConsumerStrategies.SubscribePattern(pattern, {**P, "auto.offset.reset": "earliest"})
    assert sorted({tp.topic for tp in _start(cluster, strategy)}) == topics


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [(re.compile("orders", re.ASCII), "re.ASCII"), (re.compile(b"orders"), "not bytes")],
)
def test_a_compiled_pattern_with_flags_that_cannot_travel_is_refused(
    pattern: re.Pattern[Any], hint: str
) -> None:
    with pytest.raises(ConfigurationError, match=hint) as info:
        ConsumerStrategies.SubscribePattern(pattern, P)
    assert info.value.option == "pattern"


def test_assign_of_a_partition_the_topic_lacks_is_refused_at_start(cluster: FakeCluster) -> None:
    # Spark Streaming fails too, once the consumer's position for it times out.
    strategy = ConsumerStrategies.Assign([T0, ("t", 5)], P)
    with pytest.raises(TopicNotFoundError, match=r"Option 'assign' names t-5,"):
        _start(cluster, strategy)


@pytest.mark.parametrize(
    ("given", "stored", "option"),
    [
        # Regression (review): both were reported as "Invalid option 'auto.offset.reset'".
        ({}, {T0: 11}, "offsets stored for group 'g'"),
        ({T0: 11}, {}, "offsets"),
        ({T0: 11}, {T0: 3}, "offsets"),  # given wins over stored
        ({T0: 3}, {T1: 99}, "offsets stored for group 'g'"),
    ],
)
def test_start_beyond_the_log_end_is_refused_naming_where_the_offset_came_from(
    cluster: FakeCluster,
    given: PartitionOffsets,
    stored: PartitionOffsets,
    option: str,
) -> None:
    s = ConsumerStrategies.Subscribe(["t"], P, given)
    with pytest.raises(ConfigurationError, match=r"log end offset \d+ of t-") as info:
        _start(cluster, s, stored)
    assert info.value.option == option
    assert "auto.offset.reset" not in str(info.value)


# --- batch planning -------------------------------------------------------------------------------


def planner(
    cluster: FakeCluster,
    strategy: ConsumerStrategy,
    *,
    stored: PartitionOffsets | None = None,
    max_rate: Callable[[TopicPartition], float] = lambda _tp: 0.0,
    interval: float = 2.0,
    fail_on_data_loss: bool = True,
) -> DirectStreamPlanner:
    stored = stored or {}
    return DirectStreamPlanner(
        strategy,
        cluster.reader(),
        lambda tps: {tp: off for tp, off in stored.items() if tp in tps},
        batch_interval_s=interval,
        max_rate=max_rate,
        min_rate=lambda _tp: 1,
        fail_on_data_loss=fail_on_data_loss,
    )


def test_plan_reads_up_to_latest_one_range_per_partition(cluster: FakeCluster) -> None:
    p = planner(
        cluster, ConsumerStrategies.Subscribe(["t"], {**P, "auto.offset.reset": "earliest"})
    )
    current = p.initial_offsets()
    assert current == {T0: 0, T1: 0}
    assert p.plan(current) == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 20)]
    # An empty batch still has its (empty) ranges, as a DStream's KafkaRDD does.
    assert p.plan({T0: 10, T1: 20}) == [OffsetRange("t", 0, 10, 10), OffsetRange("t", 1, 20, 20)]


def test_plan_asks_for_latest_and_earliest_once_each(cluster: FakeCluster) -> None:
    p = planner(cluster, ConsumerStrategies.Subscribe(["t"], P))
    p.plan({T0: 0, T1: 0})
    assert p.reader.calls["latest"] == 1  # type: ignore[attr-defined]
    assert p.reader.calls["earliest"] == 1  # type: ignore[attr-defined]


def test_plan_applies_max_rate_per_partition(cluster: FakeCluster) -> None:
    rates = {T0: 2.0, T1: 3.0}
    p = planner(cluster, ConsumerStrategies.Subscribe(["t"], P), max_rate=lambda tp: rates[tp])
    assert p.plan({T0: 0, T1: 0}) == [OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 6)]


def test_plan_spreads_the_backpressure_rate_by_lag(cluster: FakeCluster) -> None:
    p = planner(cluster, ConsumerStrategies.Subscribe(["t"], P), interval=1.0)
    # lags 10 and 20, rate 6/s: 2 and 4 records.
    assert p.plan({T0: 0, T1: 0}, backpressure_rate=6) == [
        OffsetRange("t", 0, 0, 2),
        OffsetRange("t", 1, 0, 4),
    ]


def test_new_partitions_start_at_earliest_unless_stored(cluster: FakeCluster) -> None:
    s = ConsumerStrategies.SubscribePattern("t|u|v", P)  # auto.offset.reset=latest
    p = planner(cluster, s, stored={TopicPartition("v", 0): 2})
    current = p.initial_offsets()
    assert current == {T0: 10, T1: 20}
    cluster.add_partitions("t")
    cluster.append("t", 2, 5)
    cluster.create_topic("u", records=3)
    cluster.create_topic("v", records=4)
    ranges = p.plan(current)
    assert ranges == [
        OffsetRange("t", 0, 10, 10),
        OffsetRange("t", 1, 20, 20),
        OffsetRange("t", 2, 0, 5),
        OffsetRange("u", 0, 0, 3),
        OffsetRange("v", 0, 2, 4),
    ]


def test_a_vanished_partition_is_data_loss(cluster: FakeCluster) -> None:
    cluster.create_topic("u", records=3)
    s = ConsumerStrategies.Subscribe(["t", "u"], P)
    current = {T0: 10, T1: 20, TopicPartition("u", 0): 1}
    cluster.delete_topic("u")
    with pytest.raises(DataLossError, match="u-0"):
        planner(cluster, s).plan(current)
    ranges = planner(cluster, s, fail_on_data_loss=False).plan(current)
    assert [r.topic for r in ranges] == ["t", "t"]


def test_a_recreated_topic_is_data_loss_and_resumes_at_its_start(cluster: FakeCluster) -> None:
    s = ConsumerStrategies.Subscribe(["t"], P)
    cluster.recreate_topic("t", partitions=2, records=[4, 4])
    with pytest.raises(DataLossError, match="t-0"):
        planner(cluster, s).plan({T0: 10, T1: 20})
    ranges = planner(cluster, s, fail_on_data_loss=False).plan({T0: 10, T1: 20})
    assert ranges == [OffsetRange("t", 0, 0, 4), OffsetRange("t", 1, 0, 4)]


def test_aged_out_offsets_are_data_loss(cluster: FakeCluster) -> None:
    cluster.age_out("t", 1, 15)
    s = ConsumerStrategies.Subscribe(["t"], P)
    with pytest.raises(DataLossError, match="t-1"):
        planner(cluster, s).plan({T0: 0, T1: 5})
    ranges = planner(cluster, s, fail_on_data_loss=False).plan({T0: 0, T1: 5})
    assert ranges == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 15, 20)]


@pytest.mark.parametrize("when", ["start", "batch"])
def test_data_loss_names_the_argument_of_create_direct_stream(
    cluster: FakeCluster, when: str
) -> None:
    # Regression (review): the fix said "set the source option 'failOnDataLoss'", which a
    # createDirectStream user does not have.
    cluster.age_out("t", 1, 15)
    p = planner(cluster, ConsumerStrategies.Subscribe(["t"], P), stored={T0: 0, T1: 5})
    with pytest.raises(DataLossError, match="t-1") as info:
        p.initial_offsets() if when == "start" else p.plan({T0: 0, T1: 5})
    assert "pass failOnDataLoss=False to KafkaUtils.createDirectStream" in str(info.value)
    assert "source option" not in str(info.value)
    assert (info.value.topic, info.value.partition) == ("t", 1)


def test_a_subscribed_topic_that_does_not_exist_yet_is_waited_for() -> None:
    cluster = FakeCluster()
    p = planner(
        cluster, ConsumerStrategies.Subscribe(["late"], {**P, "auto.offset.reset": "latest"})
    )
    assert p.initial_offsets() == {}
    assert p.plan({}) == []
    cluster.create_topic("late", records=2)
    # Created after the start: read from earliest, not from "latest".
    assert p.plan({}) == [OffsetRange("late", 0, 0, 2)]


# --- KafkaUtils: arguments and the batch DataFrame ------------------------------------------------


class FakeFrame:
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.unions: list[FakeFrame] = []

    def unionByName(self, other: FakeFrame) -> FakeFrame:
        self.unions.append(other)
        return self


class FakeReader:
    def __init__(self, spark: FakeSpark) -> None:
        self.spark = spark
        self.opts: dict[str, str] = {}

    def format(self, name: str) -> FakeReader:
        assert name == "kafka_direct"
        return self

    def option(self, key: str, value: str) -> FakeReader:
        self.opts[key] = value
        return self

    def load(self) -> FakeFrame:
        frame = FakeFrame(self.opts)
        self.spark.loads.append(frame)
        return frame


class FakeSpark:
    """Just enough SparkSession for KafkaUtils: register, read, createDataFrame."""

    def __init__(self) -> None:
        self.loads: list[FakeFrame] = []
        self.empty: list[str] = []
        self.registered: list[type] = []
        spark = self

        class Registration:
            def register(self, source: type) -> None:
                spark.registered.append(source)

        self.dataSource = Registration()

    @property
    def read(self) -> FakeReader:
        return FakeReader(self)

    def createDataFrame(self, rows: list[object], schema: str) -> str:
        assert rows == []
        self.empty.append(schema)
        return "empty"


def create(**kwargs: object) -> object:
    from kafka_direct.dstream.kafka_utils import KafkaUtils

    args: dict[str, object] = {"batchInterval": 1.0, **kwargs}
    return KafkaUtils.createDirectStream(
        FakeSpark(),
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.Subscribe(["t"], P),
        **args,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("kwargs", "option", "fragment"),
    [
        pytest.param({"batchInterval": 0}, "batchInterval", "> 0", id="interval 0"),
        pytest.param({"batchInterval": "2s"}, "batchInterval", ">= 0", id="interval text"),
        pytest.param({"initialRate": 100}, "initialRate", "backpressure=True", id="initial rate"),
        pytest.param({"maxRatePerPartition": -1}, "maxRatePerPartition", ">= 0", id="neg rate"),
        pytest.param(
            {"maxRatePerPartition": {"t": 5}},
            "maxRatePerPartition",
            "TopicPartition",
            id="rate map by topic",
        ),
        pytest.param({"minRatePerPartition": 0}, "minRatePerPartition", ">= 1", id="min rate"),
        pytest.param(
            {"backpressure": True, "pidMinRate": 0}, "pidMinRate", "> 0", id="pid min rate"
        ),
        pytest.param(
            {"backpressure": True, "pidIntegral": -0.1}, "pidIntegral", ">= 0", id="pid integral"
        ),
        pytest.param({"failurePolicy": "ignore"}, "failurePolicy", "'retry'", id="policy"),
        pytest.param({"maxRetries": -1}, "maxRetries", ">= 0", id="retries"),
        pytest.param({"offsetStore": {}}, "offsetStore", "OffsetStore", id="store"),
        pytest.param(
            {"sourceOptions": {"startingOffsets": "earliest"}},
            "sourceOptions['startingOffsets']",
            "arguments of createDirectStream",
            id="stream-owned source option",
        ),
        pytest.param(
            {"sourceOptions": {"includeHeaders": "yes"}},
            "includeHeaders",
            "'true' or 'false'",
            id="bad source option value",
        ),
    ],
)
def test_create_direct_stream_validates_its_arguments(
    kwargs: dict[str, object], option: str, fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        create(**kwargs)
    assert info.value.option == option
    assert fragment in str(info.value)


def test_create_direct_stream_registers_the_source_and_builds_a_stream() -> None:
    from kafka_direct.dstream.stream import DirectKafkaStream

    stream = create(maxRatePerPartition={("t", 0): 5}, sourceOptions={"includeHeaders": "true"})
    assert isinstance(stream, DirectKafkaStream)
    assert stream.group_id == "g"
    assert not stream.isActive
    assert "Subscribe(subscribe=t, group.id=g)" in repr(stream)


def test_batch_frame_reads_exactly_the_ranges_through_the_batch_source() -> None:
    from kafka_direct.dstream.kafka_utils import batch_frame

    spark = FakeSpark()
    ranges = [
        OffsetRange("t", 0, 5, 9),
        OffsetRange("t", 1, 7, 7),  # empty: left out of the read
        OffsetRange("u", 0, 0, 3),
    ]
    frame = batch_frame(spark, {"bootstrap.servers": "b", "group.id": "g"}, ranges, {"x": "y"})
    assert len(spark.loads) == 1
    assert frame is spark.loads[0]
    # One read of exactly the planned ranges: the batch reader plans nothing again.
    assert spark.loads[0].options == {
        "kafka.bootstrap.servers": "b",
        "kafka.group.id": "g",
        "x": "y",
        "offsetRanges": '[{"topic": "t", "partition": 0, "fromOffset": 5, "untilOffset": 9}, '
        '{"topic": "u", "partition": 0, "fromOffset": 0, "untilOffset": 3}]',
    }


@pytest.mark.parametrize(
    "key",
    ["kafka.ssl.key.pem", "kafka.sasl.password", "kafka.some.unknown.setting", "ssl.key.pem"],
)
def test_a_refused_source_option_never_shows_a_secret(key: str) -> None:
    secret = "-----BEGIN PRIVATE KEY-----s3cr3t-key"
    with pytest.raises(ConfigurationError) as info:
        create(sourceOptions={key: secret})
    assert info.value.option == f"sourceOptions['{key}']"
    assert "s3cr3t" not in str(info.value) and "s3cr3t" not in repr(info.value.value)


def test_batch_frame_of_an_empty_batch_touches_no_kafka() -> None:
    from kafka_direct.dstream.kafka_utils import batch_frame

    spark = FakeSpark()
    assert (
        batch_frame(spark, {}, [OffsetRange("t", 0, 5, 5)], {"includeHeaders": "true"}) == "empty"
    )
    assert batch_frame(spark, {}, [], {}) == "empty"
    assert spark.loads == []
    assert spark.empty[0].endswith("headers array<struct<key: string, value: binary>>")
    assert "headers" not in spark.empty[1]


def test_create_rdd_reads_several_ranges_of_one_partition_in_one_read() -> None:
    from kafka_direct.dstream.kafka_utils import KafkaUtils

    spark = FakeSpark()
    frame = KafkaUtils.createRDD(
        spark,
        {"bootstrap.servers": "b"},  # no group needed for a one-off read
        [OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 10, 15), OffsetRange("t", 1, 0, 2)],
    )
    assert len(spark.loads) == 1
    assert frame is spark.loads[0]
    assert frame.unions == []
    assert [(r["fromOffset"], r["untilOffset"]) for r in _ranges_of(spark.loads[0])] == [
        (0, 5),
        (10, 15),
        (0, 2),
    ]
    assert "kafka.group.id" not in spark.loads[0].options
    assert spark.registered  # the format is registered with the session


def _ranges_of(frame: FakeFrame) -> list[dict[str, object]]:
    import json

    return list(json.loads(frame.options["offsetRanges"]))
