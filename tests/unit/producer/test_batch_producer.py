"""Both producer paths and the write task, against librdkafka's mock cluster (in this process,
no broker to install) and, for the task's rules, fake producers. No Spark.

Every producer test runs twice, on the Python path
(:class:`~kafka_direct.producer.batch_producer.PythonBatchProducer`, the reference) and on the C
fast path (:class:`~kafka_direct.producer.native.NativeBatchProducer`): the same records written,
the same errors raised. The fast path must be available here: without the extension these
tests fail rather than compare the Python path with itself. What only the C path has (its
checks of the buffers it is given, use from two threads, a forked child) is in
test_native_producer.py.

The same paths through Spark, against the embedded broker: tests/integration/test_sink_*.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_direct.config.sink import parse_sink_options
from kafka_direct.errors import ConfigurationError, DeliveryError, KafkaClientError
from kafka_direct.executor.lease_pool import LeasePool
from kafka_direct.producer import batch_producer as bp
from kafka_direct.producer import native
from kafka_direct.producer.batch_producer import BatchProducer, PythonBatchProducer
from kafka_direct.producer.columns import HEADERS_TYPE, SinkColumns, plan_columns
from kafka_direct.producer.native import NativeBatchProducer
from kafka_direct.producer.partitioning import murmur2_partition
from kafka_direct.producer.pool import PRODUCERS, ProducerKey
from kafka_direct.producer.write import WriteSettings, new_producer, write_batches
from kafka_direct.testing.mock_cluster import ApiKey, MockCluster

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

Factory = Callable[[Mapping[str, str]], BatchProducer]
IMPLEMENTATIONS: dict[str, Factory] = {"python": PythonBatchProducer, "native": NativeBatchProducer}


@pytest.fixture(params=list(IMPLEMENTATIONS))
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and not native.available():
        pytest.fail(f"the C write path is not available: {native.status()}")
    return str(request.param)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1) as mc:
        yield mc


def new_topic(cluster: MockCluster, partitions: int) -> str:
    """A topic of this test's own: both implementations write the same rows to topics of their
    own, and each reads back exactly what it wrote."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=partitions)
    return name


def producer(kind: str, cluster: MockCluster, **settings: str) -> BatchProducer:
    options = {"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": "x"}
    options.update({f"kafka.{k}": v for k, v in settings.items()})
    return IMPLEMENTATIONS[kind](parse_sink_options(options).producer)


def read_all(cluster: MockCluster, topic: str, partitions: int, expected: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "r"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < expected and time.monotonic() < deadline:
        got += [m for m in consumer.consume(1000, 0.5) if m.error() is None]
    time.sleep(0.2)
    got += [m for m in consumer.consume(1000, 0.2) if m.error() is None]  # nothing more
    consumer.close()
    return [(m.partition(), m.offset(), m.key(), m.value(), m.headers()) for m in got]


def offsets_end(cluster: MockCluster, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "r"})
    ends = [
        consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)
    ]
    consumer.close()
    return sum(ends)


def values_batch(values: list[Any]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.binary())], names=["value"])


VALUE_ONLY = [("value", "binary")]


def test_every_shape_of_row_is_written_as_given(kind: str, cluster: MockCluster) -> None:
    topic = new_topic(cluster, 2)
    batch = pa.record_batch(
        [
            pa.array(["a", "b", None, "d", ""], pa.string()),
            pa.array([b"k1", None, b"k3", b"k4", b""], pa.binary()),
            pa.array([0, 1, None, 1, 0], pa.int32()),
            pa.array(
                [[("h", b"1"), ("n", None)], None, [], [("h", b"4"), ("e", b"")], [("h", b"5")]],
                HEADERS,
            ),
            pa.array([topic] * 5, pa.string()),
        ],
        names=["value", "key", "partition", "headers", "topic"],
    )
    fields = [
        ("value", "string"),
        ("key", "binary"),
        ("partition", "int"),
        ("headers", HEADERS_TYPE),
        ("topic", "string"),
    ]
    p = producer(kind, cluster)
    p.produce_batch(batch, plan_columns(fields, None))
    p.flush(10)
    p.close()
    got = [
        (part, key, value, headers)
        for part, _, key, value, headers in read_all(cluster, topic, 2, 5)
    ]
    expected = [
        (0, b"k1", b"a", [("h", b"1"), ("n", None)]),
        (1, None, b"b", None),
        # a null partition: the partitioner; a null value: a tombstone
        (murmur2_partition(b"k3", 2), b"k3", None, None),
        (1, b"k4", b"d", [("h", b"4"), ("e", b"")]),
        (0, b"", b"", [("h", b"5")]),  # empty, not null
    ]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_records_keep_their_order_within_a_partition(kind: str, cluster: MockCluster) -> None:
    topic = new_topic(cluster, 2)
    n = 5000
    batch = pa.record_batch(
        [
            pa.array([f"{i:05d}".encode() for i in range(n)]),
            pa.array([i % 2 for i in range(n)], pa.int32()),
        ],
        names=["value", "partition"],
    )
    p = producer(kind, cluster)
    p.produce_batch(batch, plan_columns([("value", "binary"), ("partition", "int")], topic))
    p.flush(10)
    p.close()
    got = read_all(cluster, topic, 2, n)
    for part in (0, 1):
        values = [v for q, _, _, v, _ in sorted(got) if q == part]
        assert values == [f"{i:05d}".encode() for i in range(part, n, 2)]


def test_a_topic_column_writes_each_row_to_its_topic(kind: str, cluster: MockCluster) -> None:
    first, second = new_topic(cluster, 1), new_topic(cluster, 1)
    topics = [first, second, second, first, second]
    batch = pa.record_batch(
        [pa.array([b"0", b"1", b"2", b"3", b"4"]), pa.array(topics)], names=["value", "topic"]
    )
    p = producer(kind, cluster)
    p.produce_batch(batch, plan_columns([("value", "binary"), ("topic", "string")], None))
    p.flush(10)
    p.close()
    assert [v for *_, v, _ in read_all(cluster, first, 1, 2)] == [b"0", b"3"]
    assert [v for *_, v, _ in read_all(cluster, second, 1, 3)] == [b"1", b"2", b"4"]


def test_sliced_and_large_arrays_are_written_as_given(kind: str, cluster: MockCluster) -> None:
    """An Arrow batch may be a slice of a larger one (an offset into its buffers), and may use
    64-bit offsets (large_binary, large_string, large_list)."""
    topic = new_topic(cluster, 1)
    large_headers = pa.large_list(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    whole = pa.record_batch(
        [
            pa.array([f"v{i}" for i in range(10)], pa.large_string()),
            pa.array(
                [None if i % 3 == 0 else f"k{i}".encode() for i in range(10)], pa.large_binary()
            ),
            pa.array(
                [[("h", f"{i}".encode())] if i % 2 else None for i in range(10)], large_headers
            ),
        ],
        names=["value", "key", "headers"],
    )
    sliced = whole.slice(3, 5)  # rows 3..7
    fields = [("value", "string"), ("key", "binary"), ("headers", HEADERS_TYPE)]
    p = producer(kind, cluster)
    p.produce_batch(sliced, plan_columns(fields, topic))
    p.flush(10)
    p.close()
    got = [(k, v, h) for _, _, k, v, h in read_all(cluster, topic, 1, 5)]
    assert got == [
        (
            None if i % 3 == 0 else f"k{i}".encode(),
            f"v{i}".encode(),
            [("h", f"{i}".encode())] if i % 2 else None,
        )
        for i in range(3, 8)
    ]


def test_a_headers_struct_named_in_another_case_is_read_by_position_as_spark_reads_it(
    kind: str, cluster: MockCluster
) -> None:
    # Spark's type check ignores the case of struct field names; its writer reads the fields
    # by position, so array<struct<Key:string,Value:binary>> writes as the usual headers.
    topic = new_topic(cluster, 1)
    upper = pa.list_(pa.struct([("Key", pa.string()), ("VALUE", pa.binary())]))
    batch = pa.record_batch(
        [pa.array([b"v0", b"v1"]), pa.array([[("a", b"1"), ("b", None)], None], upper)],
        names=["value", "headers"],
    )
    fields = [("value", "binary"), ("headers", "array<struct<Key:string,VALUE:binary>>")]
    p = producer(kind, cluster)
    p.produce_batch(batch, plan_columns(fields, topic))
    p.flush(10)
    p.close()
    got = [(v, h) for _, _, _, v, h in read_all(cluster, topic, 1, 2)]
    assert got == [(b"v0", [("a", b"1"), ("b", None)]), (b"v1", None)]


def test_keyed_records_land_where_javas_partitioner_puts_them(
    kind: str, cluster: MockCluster
) -> None:
    topic = new_topic(cluster, 3)
    keys = [f"key-{i}".encode() for i in range(300)]
    batch = pa.record_batch([pa.array(keys), pa.array([b"v"] * 300)], names=["key", "value"])
    p = producer(kind, cluster)
    p.produce_batch(batch, plan_columns([("key", "binary"), ("value", "binary")], topic))
    p.flush(10)
    p.close()
    got = read_all(cluster, topic, 3, 300)
    assert len(got) == 300
    assert all(part == murmur2_partition(key, 3) for part, _, key, _, _ in got)


def queue_waits(p: BatchProducer) -> int:
    """How often the producer found the queue full and waited (the C path counts them)."""
    if isinstance(p, NativeBatchProducer):
        return int(p._impl.full_waits)
    return int(getattr(p, "waits", 0))


def test_a_full_queue_makes_the_task_wait_never_fail(
    kind: str, cluster: MockCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = PythonBatchProducer._when_room

    def counting(self: PythonBatchProducer, *args: Any) -> None:
        vars(self)["waits"] = vars(self).get("waits", 0) + 1
        real(self, *args)

    monkeypatch.setattr(PythonBatchProducer, "_when_room", counting)
    topic = new_topic(cluster, 1)
    # A 10-record queue; linger.ms=1, or each tiny batch would wait 50 ms for more records.
    p = producer(kind, cluster, **{"queue.buffering.max.messages": "10", "linger.ms": "1"})
    values = [f"{i:05d}".encode() for i in range(3000)]
    p.produce_batch(values_batch(values), plan_columns(VALUE_ONLY, topic))
    p.flush(20)
    waits = queue_waits(p)
    p.close()
    assert waits > 0  # the queue was full, and every record still went out, in order
    assert [v for *_, v, _ in read_all(cluster, topic, 1, 3000)] == values


def test_a_broker_that_stops_answering_fails_the_flush_within_the_delivery_timeout(
    kind: str,
) -> None:
    with MockCluster(brokers=1) as down:
        bootstrap = down.bootstrap_servers
        down.create_topic("t", partitions=1)
        p = producer(kind, down, **{"delivery.timeout.ms": "1500"})
        batch = values_batch([b"x" * 100] * 100)
        p.produce_batch(batch, plan_columns(VALUE_ONLY, "t"))
        p.flush(10)  # the broker answers: all delivered
        down.broker_down(1)
        started = time.monotonic()
        p.produce_batch(batch, plan_columns(VALUE_ONLY, "t"))
        with pytest.raises(KafkaClientError) as info:
            p.flush(1.5 + bp.FLUSH_SLICE_S + 5)
        elapsed = time.monotonic() - started
        p.abort()
        closing = time.monotonic()
        p.close()
        assert time.monotonic() - closing < 5
    message = str(info.value)
    assert elapsed < 1.5 + 3, elapsed
    assert "a record for t-0 was not delivered" in message
    assert "_MSG_TIMED_OUT" in message and info.value.code == "_MSG_TIMED_OUT"
    assert f"No broker at {bootstrap}" in message
    assert "kafka.delivery.timeout.ms=1500 ms" in message
    assert isinstance(info.value, DeliveryError)
    assert (info.value.topic, info.value.partition) == ("t", 0)


def test_a_fatal_error_fails_the_task_and_makes_the_producer_unusable(kind: str) -> None:
    with MockCluster(brokers=1) as mc:
        mc.create_topic("t", partitions=1)
        p = producer(kind, mc)
        batch = values_batch([b"v"])
        columns = plan_columns(VALUE_ONLY, "t")
        p.produce_batch(batch, columns)
        p.flush(10)
        assert p.usable
        # The broker loses the idempotent producer's sequence: librdkafka's fatal error.
        mc.push_request_errors(ApiKey.PRODUCE, 45, 45, 45)
        with pytest.raises(KafkaClientError) as info:
            p.produce_batch(batch, columns)
            p.flush(10)
        assert not p.usable
        assert "OUT_OF_ORDER_SEQUENCE_NUMBER" in str(info.value) or "FATAL" in str(info.value)
        mc.clear_request_errors(ApiKey.PRODUCE)
        p.close()


def test_a_null_topic_without_the_option_names_the_option(kind: str, cluster: MockCluster) -> None:
    topic = new_topic(cluster, 1)
    batch = pa.record_batch(
        [pa.array([b"v", b"w"]), pa.array([topic, None])], names=["value", "topic"]
    )
    p = producer(kind, cluster)
    with pytest.raises(ConfigurationError) as info:
        p.produce_batch(batch, plan_columns([("value", "binary"), ("topic", "string")], None))
    p.flush(10)  # the row before it was handed over
    p.close()
    assert info.value.option == "topic"
    assert "Row 1 of a batch has a null topic. Set .option('topic', 'name')" in str(info.value)
    assert [v for *_, v, _ in read_all(cluster, topic, 1, 1)] == [b"v"]


@pytest.mark.parametrize(
    ("partition", "phrase"),
    [(-3, "has partition -3; a partition is >= 0, or null"), (7, "-7")],
)
def test_a_partition_that_does_not_exist_names_topic_and_partition(
    kind: str, cluster: MockCluster, partition: int, phrase: str
) -> None:
    topic = new_topic(cluster, 1)
    batch = pa.record_batch(
        [pa.array([b"v"]), pa.array([partition], pa.int32())], names=["value", "partition"]
    )
    p = producer(kind, cluster, **{"delivery.timeout.ms": "3000"})
    with pytest.raises(KafkaClientError) as info:
        p.produce_batch(batch, plan_columns([("value", "binary"), ("partition", "int")], topic))
        p.flush(10)
    p.abort()
    p.close()
    assert phrase in str(info.value)
    assert topic in str(info.value)


@pytest.mark.parametrize(
    ("headers", "what"),
    [([("h", b"1"), None], "a null header"), ([(None, b"1")], "a header with a null key")],
)
def test_a_header_kafka_cannot_carry_is_refused_with_the_row(
    kind: str, cluster: MockCluster, headers: list[Any], what: str
) -> None:
    topic = new_topic(cluster, 1)
    nullable = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
    batch = pa.record_batch(
        [pa.array([b"v", b"w"]), pa.array([[("a", b"")], headers], nullable)],
        names=["value", "headers"],
    )
    p = producer(kind, cluster)
    with pytest.raises(KafkaClientError) as info:
        p.produce_batch(
            batch, plan_columns([("value", "binary"), ("headers", HEADERS_TYPE)], topic)
        )
    p.abort()
    p.close()
    assert f"row 1 of a batch for topic '{topic}' has {what}" in str(info.value)
    assert info.value.code == "_INVALID_ARG"


def test_a_record_librdkafka_refuses_names_the_topic_and_the_cause(
    kind: str, cluster: MockCluster
) -> None:
    topic = new_topic(cluster, 1)
    p = producer(kind, cluster)
    with pytest.raises(KafkaClientError) as info:
        p.produce_batch(values_batch([b"x" * 2_000_000]), plan_columns(VALUE_ONLY, topic))
    p.close()
    # librdkafka says "Broker:", but the producer refused the record itself: name the limit.
    assert str(info.value).startswith(
        f"Writing to Kafka failed: a record for {topic} is larger than the producer's "
        "kafka.message.max.bytes allows (1048576 bytes unless set"
    )
    assert "raise kafka.message.max.bytes (or kafka.max.request.size)" in str(info.value)
    assert info.value.code == "MSG_SIZE_TOO_LARGE"
    assert p.usable  # the producer itself is fine


def test_records_that_never_got_a_partition_are_reported_without_raising_in_the_callback(
    kind: str,
) -> None:
    # Nothing at this address: records wait without metadata, so without a partition.
    p = IMPLEMENTATIONS[kind](
        parse_sink_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}).producer
    )
    p.produce_batch(values_batch([b"v"] * 10), plan_columns(VALUE_ONLY, "t"))
    p.abort()  # purges: every record gets a failed delivery report, partition unknown
    with pytest.raises(KafkaClientError) as info:
        p.flush(5)
    p.close()
    assert "a record for t (no partition assigned yet) was not delivered" in str(info.value)
    assert isinstance(info.value, DeliveryError) and info.value.partition is None


def test_a_bad_setting_is_refused_at_creation_with_librdkafkas_reason(kind: str) -> None:
    config = {"bootstrap.servers": "127.0.0.1:1", "no.such.setting": "1"}
    with pytest.raises(KafkaClientError) as info:
        IMPLEMENTATIONS[kind](config)
    assert "Creating the Kafka producer on the executor" in str(info.value)
    assert "no.such.setting" in str(info.value) and info.value.code == "_INVALID_ARG"


# -- the write task ------------------------------------------------------------------------------


class FakeProducer:
    def __init__(self, fail_at_flush: bool = False) -> None:
        self.usable = True
        self.rows = 0
        self.flushed = self.aborted = self.closed = 0
        self.fail_at_flush = fail_at_flush

    def produce_batch(self, batch: pa.RecordBatch, columns: SinkColumns) -> None:
        self.rows += batch.num_rows

    def check(self) -> None:
        pass

    def flush(self, timeout_s: float) -> None:
        self.flushed += 1
        if self.fail_at_flush:
            raise KafkaClientError("Writing to Kafka failed: a record for t-0 was not delivered")

    def abort(self) -> None:
        self.aborted += 1

    def close(self) -> None:
        self.closed += 1


def settings(**kw: Any) -> WriteSettings:
    opts = parse_sink_options({"kafka.bootstrap.servers": "b:1", "topic": "t"})
    return WriteSettings(opts.producer, plan_columns([("value", "binary")], "t"), 1000, **kw)


def batches(*sizes: int) -> list[pa.RecordBatch]:
    return [pa.record_batch([pa.array([b"v"] * n)], names=["value"]) for n in sizes]


def test_a_task_counts_flushes_and_returns_its_producer_to_the_pool() -> None:
    made: list[FakeProducer] = []
    pool: LeasePool[ProducerKey, Any] = LeasePool(
        lambda k, c: made.append(FakeProducer()) or made[-1], PRODUCERS, reaper=False
    )
    first = write_batches(settings(fast_path=False), batches(3, 0, 4), pool=pool, attempt=0)
    assert (first.records, first.batches, first.kind, first.reused) == (7, 3, "python", False)
    second = write_batches(settings(fast_path=False), batches(2), pool=pool, attempt=0)
    assert second.reused and len(made) == 1
    assert made[0].flushed == 2 and made[0].rows == 9 and made[0].closed == 0


def test_a_failed_task_purges_and_closes_its_producer_and_the_retry_gets_a_new_one() -> None:
    made: list[FakeProducer] = []

    def factory(key: ProducerKey, config: Any) -> FakeProducer:
        made.append(FakeProducer(fail_at_flush=not made))
        return made[-1]

    pool: LeasePool[ProducerKey, Any] = LeasePool(factory, PRODUCERS, reaper=False)
    with pytest.raises(KafkaClientError, match="t-0 was not delivered"):
        write_batches(settings(), batches(5), pool=pool, attempt=0)
    assert (made[0].aborted, made[0].closed) == (1, 1)
    retry = write_batches(settings(), batches(5), pool=pool, attempt=1)
    assert retry.records == 5 and not retry.reused and made[1].closed == 0


def test_the_write_task_takes_the_fast_path_unless_told_not_to() -> None:
    made: list[ProducerKey] = []

    def factory(key: ProducerKey, config: Any) -> FakeProducer:
        made.append(key)
        return FakeProducer()

    pool: LeasePool[ProducerKey, Any] = LeasePool(factory, PRODUCERS, reaper=False)
    fast = write_batches(settings(fast_path=True), batches(1), pool=pool, attempt=0)
    slow = write_batches(settings(fast_path=False), batches(1), pool=pool, attempt=0)
    assert (fast.kind, slow.kind) == ("native", "python")
    assert [key.kind for key in made] == ["native", "python"]  # never one for the other


def test_the_write_task_and_each_producer_together(kind: str, cluster: MockCluster) -> None:
    topic = new_topic(cluster, 3)
    opts = parse_sink_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic}
    )
    ws = WriteSettings(
        opts.producer,
        plan_columns([("value", "binary")], topic),
        opts.delivery_timeout_ms,
        fast_path=kind == "native",
    )
    pool: LeasePool[ProducerKey, Any] = LeasePool(new_producer, PRODUCERS, reaper=False)
    result = write_batches(ws, batches(10_000, 5_000, 1), pool=pool, attempt=0)
    again = write_batches(ws, batches(1_000), pool=pool, attempt=0)
    pool.close_all()
    assert (result.records, again.records, again.reused, again.kind) == (15_001, 1_000, True, kind)
    assert offsets_end(cluster, topic, 3) == 16_001  # the mock's watermark is exact
