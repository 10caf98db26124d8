"""The data source's readers: built without I/O, pickled to executors, errors trimmed.

No SparkSession and no broker: PySpark's classes are plain Python until Spark drives them.
"""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.source import datasource as source_module
from kafka_direct.source.datasource import KafkaDirectDataSource, KafkaInputPartition

# Port 9 (discard) on loopback: any connection attempt in __init__ would fail loudly or hang.
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "kafka.sasl.password": "pw!"}


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """schema() checks the cluster at load(); here there is none (the real check runs in
    tests/integration/test_errors.py)."""
    checked: list[object] = []
    monkeypatch.setattr(source_module, "check_cluster", checked.append)
    return checked


def source(**extra: str) -> KafkaDirectDataSource:
    return KafkaDirectDataSource(CaseInsensitiveDict({**BASE, **extra}))


def test_schema_follows_include_headers() -> None:
    assert "headers" not in source().schema()
    assert (
        source(includeHeaders="true")
        .schema()
        .endswith("headers array<struct<key: string, value: binary>>")
    )


def test_readers_open_nothing_and_pickle_cleanly() -> None:
    ds = source()
    batch = ds.reader(None)
    stream = ds.streamReader(None)
    for reader in (batch, stream):
        clone = pickle.loads(pickle.dumps(reader))
        assert clone.settings == reader.settings
    assert stream.planner._reader is None  # lazily created, never at construction
    assert "pw!" not in repr(batch.settings) and "pw!" not in repr(stream.opts)


def test_input_partition_carries_its_range_through_pickle() -> None:
    part = KafkaInputPartition(OffsetRange("t", 3, 10, 20))
    clone = pickle.loads(pickle.dumps(part))
    assert clone.ranges == (OffsetRange("t", 3, 10, 20),)
    assert clone.log_starts == {}


def test_packed_input_partition_carries_its_ranges_and_log_starts_through_pickle() -> None:
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("b", 2, 7, 9)]
    starts = {TopicPartition("a", 0): 0, TopicPartition("b", 2): 3, TopicPartition("c", 0): 1}
    clone = pickle.loads(pickle.dumps(KafkaInputPartition(ranges, starts)))
    assert clone.ranges == tuple(ranges)
    # Only the task's own partitions travel with it.
    assert clone.log_starts == {TopicPartition("a", 0): 0, TopicPartition("b", 2): 3}


def test_placeholder_partition_reads_nothing() -> None:
    # PySpark substitutes InputPartition(None) when a batch plans no partitions.
    assert list(source().reader(None).read(InputPartition(None))) == []


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ReadAllAvailable()),
        ({"maxOffsetsPerTrigger": "500"}, ReadMaxRows(500)),
        ({"maxOffsetsPerPartitionPerTrigger": "7"}, ReadMaxRows(2**63 - 1)),
        ({"minOffsetsPerTrigger": "40"}, ReadMinRows(40)),
    ],
    ids=["none", "max", "per-partition-only", "min-only"],
)
def test_default_read_limit(options: dict[str, str], expected: object) -> None:
    assert source(**options).streamReader(None).getDefaultReadLimit() == expected


def test_errors_reach_spark_with_a_one_frame_traceback() -> None:
    with pytest.raises(ConfigurationError) as info:
        source(startingOffset="earliest").schema()
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[1:] == ["wrapper"]  # the caller, then no frame of the library's internals
    assert info.value.__suppress_context__


def test_ending_offsets_are_refused_by_the_stream_reader_only() -> None:
    """Regression: raised from streamReader(), the error was buried under PySpark's own
    UnboundLocalError (its runner's cleanup uses the reader it never got). The refused reader
    raises it from the query's first call instead, with nothing of ours in the traceback."""
    ds = source(endingOffsets="latest")
    ds.reader(None)  # fine for a batch
    refused = ds.streamReader(None)  # does not raise: PySpark could not report it
    for call in (
        refused.initialOffset,
        lambda: refused.latestOffset({}, ReadAllAvailable()),
        lambda: refused.partitions({}, {}),
    ):
        with pytest.raises(
            ConfigurationError, match="no ending offset in a streaming query"
        ) as info:
            call()
        assert info.value.__suppress_context__
    refused.commit({})  # nothing to commit, and no error on the way out


def test_initial_offsets_are_not_committed_before_a_batch_finishes() -> None:
    """Committing the initial start would rewind an existing group to where reading begins."""
    from tests.unit.fake_reader import FakeCluster

    cluster = FakeCluster()
    cluster.create_topic("t", partitions=1, records=5)
    stream = source(startingOffsets="earliest", commitOffsetsToGroup="g").streamReader(None)
    stream.planner._reader_factory = cluster.reader
    commits: list[object] = []
    stream.committer.commit = commits.append  # type: ignore[method-assign,union-attr]
    start = stream.initialOffset()
    end = stream.latestOffset(start, ReadAllAvailable())
    assert commits == []  # nothing was read yet
    stream.latestOffset(end, ReadAllAvailable())  # Spark asks again once batch 0 finished
    assert commits == [{("t", 0): 5}]


@pytest.mark.parametrize(
    ("options", "committed_to", "committed_start_from"),
    [
        # Spark's source never commits: kafka.group.id alone names the executors' group and
        # the group startingOffsets=committed reads, and is never committed to nor checked.
        pytest.param({"kafka.group.id": "g"}, None, "g", id="kafka.group.id alone"),
        pytest.param({"commitOffsetsToGroup": "c"}, "c", "c", id="commitOffsetsToGroup"),
        pytest.param({"kafka.group.id": "g", "commitOffsetsToGroup": "c"}, "c", "c", id="both"),
        pytest.param(
            {"commitOffsetsToGroup": "c", "commitOffsets": "false"}, None, "c", id="switched off"
        ),
        pytest.param({}, None, None, id="no group"),
    ],
)
def test_only_commit_offsets_to_group_makes_a_stream_commit(
    options: dict[str, str], committed_to: str | None, committed_start_from: str | None
) -> None:
    from tests.unit.fake_reader import FakeCluster

    cluster = FakeCluster()
    cluster.create_topic("t", partitions=1, records=5)
    secured = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "startingOffsets": "earliest",
        **options,
    }
    stream = source(**secured).streamReader(None)
    stream.planner._reader_factory = cluster.reader
    assert stream.opts.commits.group == committed_start_from
    if committed_to is None:
        assert stream.committer is None
        # No group check either: on this secured cluster it would ask the broker (port 9).
        end = stream.latestOffset(stream.initialOffset(), ReadAllAvailable())
        stream.latestOffset(end, ReadAllAvailable())
        stream.commit(end)
    else:
        assert stream.committer is not None and stream.committer.group == committed_to


def test_the_sink_commit_runner_builds_its_writer_without_asking_the_cluster() -> None:
    """Spark's sink commit runner builds a writer for every micro-batch's commit or abort: it
    must not ask the cluster (nothing answers on port 1 here; asking would wait its 10 s and
    raise), so a coordinator that is moving cannot fail a micro-batch whose tasks committed."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kafka_direct.source.sink import KafkaStreamWriter

    source = KafkaDirectDataSource(
        CaseInsensitiveDict(
            {
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "topic": "out",
                "deliveryGuarantee": "exactly-once",
                "checkpointLocation": "/tmp/kafka-direct-unit-ck",
            }
        )
    )
    schema = StructType([StructField("value", BinaryType())])
    runner = {"__name__": source_module.SINK_COMMIT_RUNNER, "source": source, "schema": schema}
    exec("writer = source.streamWriter(schema, False)", runner)  # as the runner calls it
    assert isinstance(runner["writer"], KafkaStreamWriter)
    assert runner["writer"].settings.transactions is not None
    assert not source_module._in_sink_commit_runner()  # this test's own frames: not the runner
