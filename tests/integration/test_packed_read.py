"""A packed task's ranges read together by one consumer (kafka_direct.consumer.packed), on the
real broker, through the C fast path and through confluent-kafka's messages.

Every case reads several ranges, of several partitions and topics, with one consumer assigned
all of them, and must give exactly the records produced in those ranges (keys, values, topic,
partition, offset, timestamp), the same on both paths, or fail the same way: transaction
markers (gaps), ranges ending before the log end and at it, empty ranges, several ranges of one
partition, and data loss in one of the packed partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer

from kafka_direct.consumer import packed
from kafka_direct.consumer.native import NativeConsumer
from kafka_direct.consumer.packed import GroupConsumer, fetch_ranges
from kafka_direct.consumer.pool import PoolKey
from kafka_direct.consumer.read import _new_consumer
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.errors import DataLossError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.offsets import OffsetRange
from tests.integration.kafka_helpers import Record, create_topic, delete_topic, produce_known
from tests.integration.test_native_read import config, produce, rows_of

pytestmark = pytest.mark.serial

PATHS = ("native", "python")
POLL_MS = 5_000
#: Long enough for a consumer to fetch to the log end (its queued EOF) or to fetch a burst.
IDLE_S = 1.0
BURST_FETCHED_S = 3.0


def open_group(path: str, bootstrap: str, isolation: str = "read_uncommitted") -> GroupConsumer:
    events = ClientEvents(f"test packed consumer ({path})")
    conf = config(bootstrap, isolation)

    def client() -> Any:
        if path == "native":
            return NativeConsumer(conf, events)
        return Consumer({**conf, "error_cb": events})

    return GroupConsumer(client(), events, renew=client)


def read_packed(
    path: str, bootstrap: str, ranges: list[OffsetRange], **kw: Any
) -> tuple[list[dict[str, Any]], Exception | None]:
    """The rows a fresh consumer reads of ``ranges`` (sorted), and the error it ended with."""
    gc = open_group(path, bootstrap, kw.pop("isolation", "read_uncommitted"))
    kw = {"poll_timeout_ms": POLL_MS, "fail_on_data_loss": True, "include_headers": False, **kw}
    out: list[pa.RecordBatch] = []
    error = None
    try:
        for batch in fetch_ranges(gc, ranges, batch_size=kw.pop("batch_size", 1000), **kw):
            assert batch.schema == ARROW_SCHEMA
            out.append(batch)
    except Exception as exc:  # noqa: BLE001 - compared between the paths
        error = exc
    finally:
        gc.close()
    rows = pa.Table.from_batches(out, schema=ARROW_SCHEMA).to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])), error


def expected(records: list[Record], ranges: list[OffsetRange]) -> list[dict[str, Any]]:
    rows = [
        row for rng in ranges for row in rows_of([r for r in records if r.topic == rng.topic], rng)
    ]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_the_executor_builds_a_group_consumer_for_a_packed_key(kafka_bootstrap):
    for fast_path in (True, False):
        key = PoolKey("g", "t", 0, "f", fast_path=fast_path, assignment=(("t", 0), ("t", 1)))
        gc = _new_consumer(key, config(kafka_bootstrap))
        try:
            assert isinstance(gc, GroupConsumer)
            assert isinstance(gc.consumer, NativeConsumer) is fast_path
        finally:
            gc.close()


@pytest.mark.parametrize("batch_size", [1000, 7])
def test_many_partitions_of_two_topics_in_one_consumer(
    make_topic: Callable[..., str], kafka_bootstrap: str, batch_size: int
) -> None:
    a, b = make_topic(partitions=6, prefix="packed-a"), make_topic(partitions=3, prefix="packed-b")
    records = produce_known(kafka_bootstrap, a, per_partition=21, partitions=6)
    records += produce_known(kafka_bootstrap, b, per_partition=40, partitions=3)
    ranges = [
        OffsetRange(a, 0, 0, 21),  # whole partition, to the log end
        OffsetRange(a, 1, 5, 9),  # ends well before the log end
        OffsetRange(a, 2, 20, 21),  # the last record only
        OffsetRange(a, 3, 7, 7),  # empty
        OffsetRange(a, 4, 0, 1),
        OffsetRange(a, 5, 0, 21),
        OffsetRange(b, 0, 0, 40),
        OffsetRange(b, 1, 13, 31),
        OffsetRange(b, 2, 39, 40),
    ]
    want = expected(records, ranges)
    assert len(want) == 21 + 4 + 1 + 0 + 1 + 21 + 40 + 18 + 1
    for path in PATHS:
        got, error = read_packed(path, kafka_bootstrap, ranges, batch_size=batch_size)
        assert error is None, f"{path}: {error!r}"
        assert got == want, path


def test_several_ranges_of_one_partition_read_in_rounds(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    topic = make_topic(partitions=2, prefix="packed-rounds")
    records = produce_known(kafka_bootstrap, topic, per_partition=30, partitions=2)
    # A filter narrowed partition 0 to three stretches with gaps between them.
    ranges = [
        OffsetRange(topic, 0, 0, 3),
        OffsetRange(topic, 0, 10, 12),
        OffsetRange(topic, 0, 25, 30),
        OffsetRange(topic, 1, 4, 20),
    ]
    want = expected(records, ranges)
    assert len(want) == 3 + 2 + 5 + 16
    for path in PATHS:
        got, error = read_packed(path, kafka_bootstrap, ranges)
        assert error is None, f"{path}: {error!r}"
        assert got == want, path


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_marker_gaps_of_one_partition_among_plain_ones(
    make_topic: Callable[..., str], kafka_bootstrap: str, isolation: str
) -> None:
    # Partition 0 of tx: data 0..4, marker 5, data 6..8, marker 9 (the log ends on a marker).
    tx = make_topic(prefix="packed-tx")
    tx_rows = [(0, b"t%d" % i, b"tx-%d" % i) for i in range(8)]
    records = produce(kafka_bootstrap, tx, tx_rows, transactions=[5, 3])
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 6, 7, 8]
    plain = make_topic(partitions=2, prefix="packed-plain")
    records += produce_known(kafka_bootstrap, plain, per_partition=12, partitions=2)
    # SPARK-25005's shapes, each packed with plain partitions: ranges ending on a marker, at
    # the log end, and starting on one; a reader that waited for data past a marker times out.
    for frm, until in [(0, 10), (6, 10), (0, 6), (5, 9), (9, 10), (5, 6)]:
        ranges = [
            OffsetRange(tx, 0, frm, until),
            OffsetRange(plain, 0, 0, 12),
            OffsetRange(plain, 1, 3, 8),
        ]
        want = expected(records, ranges)
        for path in PATHS:
            got, error = read_packed(path, kafka_bootstrap, ranges, isolation=isolation)
            assert error is None, f"{path} [{frm}, {until}): {error!r}"
            assert got == want, (path, frm, until)


@pytest.mark.parametrize("fail_on_data_loss", [True, False], ids=["fail", "skip"])
def test_data_loss_in_one_packed_partition(
    make_topic: Callable[..., str], kafka_bootstrap: str, fail_on_data_loss: bool
) -> None:
    # BROKER.md: DeleteRecords is not implemented, so the log shrinks by recreating the topic.
    lossy = make_topic(prefix="packed-loss")
    produce_known(kafka_bootstrap, lossy, per_partition=10)
    delete_topic(kafka_bootstrap, lossy)
    create_topic(kafka_bootstrap, lossy, partitions=1)
    new = produce_known(kafka_bootstrap, lossy, per_partition=3, start_index=100)
    intact = make_topic(partitions=2, prefix="packed-intact")
    records = new + produce_known(kafka_bootstrap, intact, per_partition=15, partitions=2)
    ranges = [
        OffsetRange(lossy, 0, 0, 10),  # the log now ends at 3: offsets 3..9 are gone
        OffsetRange(intact, 0, 0, 15),
        OffsetRange(intact, 1, 2, 15),
    ]
    outcome = {}
    for path in PATHS:
        kw = {"poll_timeout_ms": 3000, "fail_on_data_loss": fail_on_data_loss}
        got, error = read_packed(path, kafka_bootstrap, ranges, **kw)
        outcome[path] = (got, type(error), str(error))
    assert outcome["native"][1:] == outcome["python"][1:]
    rows, error_type, message = outcome["native"]
    if fail_on_data_loss:
        assert error_type is DataLossError
        assert f"Data loss on {lossy}-0" in message and "failOnDataLoss" in message
    else:
        assert error_type is type(None), message
        # Everything that still exists, of every packed partition, and nothing else.
        assert rows == expected(records, ranges)
        assert outcome["python"][0] == rows


def test_a_pooled_consumer_keeps_its_queue_for_the_next_packed_task(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    """Consecutive micro-batches of busy partitions: each task reads the same partitions to
    the log end, the next starts where the queues stand and is read from them (no assignment).
    A task that starts elsewhere, or reads other partitions, assigns afresh."""
    for path in PATHS:
        topic = make_topic(partitions=3, prefix="packed-reuse")
        records = produce_known(kafka_bootstrap, topic, per_partition=10, partitions=3)
        tasks = [
            [OffsetRange(topic, p, 0, 10) for p in range(3)],  # to the log end
            [OffsetRange(topic, p, 10, 20) for p in range(3)],  # from where the queues stand
            [OffsetRange(topic, p, 2, 5) for p in range(3)],  # behind them: assign
            [OffsetRange(topic, p, 5, 9) for p in range(2)],  # fewer partitions: assign
        ]

        def more_data(done: int, topic: str = topic, records: list[Record] = records) -> None:
            if done == 1:  # a micro-batch later: ten more records in every partition
                records += produce_known(
                    kafka_bootstrap, topic, per_partition=10, partitions=3, start_index=10
                )

        rows, assigns, clients = read_in_turn(path, kafka_bootstrap, tasks, more_data)
        assert rows == [expected(records, ranges) for ranges in tasks], path
        assert assigns == [0, 2, 3], path
        # Each assignment after the first went to a new client (see GroupConsumer.start_at).
        assert clients == 3, path


def test_a_pooled_consumer_a_micro_batch_behind_reads_forward_through_its_queue(
    make_topic: Callable[..., str], kafka_bootstrap: str
) -> None:
    """The micro-batch in between went to another Python worker: the next task starts ten
    offsets past where this consumer's queues stand. It reads forward through the queue,
    dropping the ten records before each range, with no new assignment and no new client,
    and gives exactly the task's records."""
    for path in PATHS:
        topic = make_topic(partitions=3, prefix="packed-skip")
        records = produce_known(kafka_bootstrap, topic, per_partition=10, partitions=3)
        tasks = [
            [OffsetRange(topic, p, 0, 10) for p in range(3)],  # to the log end
            [OffsetRange(topic, p, 20, 30) for p in range(3)],  # [10, 20) read elsewhere
        ]

        def more_data(done: int, topic: str = topic, records: list[Record] = records) -> None:
            if done == 1:  # two micro-batches' worth of records in every partition
                records += produce_known(
                    kafka_bootstrap, topic, per_partition=20, partitions=3, start_index=10
                )

        rows, assigns, clients = read_in_turn(path, kafka_bootstrap, tasks, more_data)
        assert rows == [expected(records, ranges) for ranges in tasks], path
        assert assigns == [0], path
        assert clients == 1, path


@pytest.mark.parametrize("behind", [False, True], ids=["kept", "a-micro-batch-behind"])
def test_a_pooled_consumer_idle_at_the_log_end_reads_the_next_burst_without_asking_the_broker(
    make_topic: Callable[..., str],
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    behind: bool,
) -> None:
    """Between micro-batches a pooled consumer sits at the log end and queues an EOF per
    partition, ahead of the records that come next. Those EOFs are stale: the next task reads
    its records from the queue without asking the broker for watermarks (a request that waits
    behind the consumer's fetch long-poll, up to fetch.wait.max.ms per partition: the bursts
    benchmark's stalls). ``behind``: the micro-batch in between went to another worker, so the
    queue also holds its records and their EOFs, and a read can end on one of them."""
    checks: list[OffsetRange] = []
    real_check = packed.check_short_log

    def counting(pc: Any, rng: OffsetRange, *args: Any) -> int:
        checks.append(rng)
        return real_check(pc, rng, *args)

    monkeypatch.setattr(packed, "check_short_log", counting)
    for path in PATHS:
        topic = make_topic(partitions=3, prefix="packed-idle")
        records = produce_known(kafka_bootstrap, topic, per_partition=10, partitions=3)
        start = 20 if behind else 10
        tasks = [
            [OffsetRange(topic, p, 0, 10) for p in range(3)],  # to the log end
            [OffsetRange(topic, p, start, start + 10) for p in range(3)],
        ]

        def burst(done: int, topic: str = topic, records: list[Record] = records) -> None:
            if done != 1:
                return
            for index in (10, 20) if behind else (10,):
                time.sleep(IDLE_S)  # the consumer reaches the log end and queues its EOFs
                records += produce_known(
                    kafka_bootstrap, topic, per_partition=10, partitions=3, start_index=index
                )
            # ... and fetches the burst behind them. librdkafka's fetch loop does that within a
            # fetch.wait.max.ms of the records' arrival; the margin is for a loaded machine (a
            # suite run on 2026-11-29 read partition 1's burst 1 s after it was written and
            # found it not yet fetched).
            time.sleep(BURST_FETCHED_S)

        checks.clear()
        rows, assigns, clients = read_in_turn(path, kafka_bootstrap, tasks, burst)
        assert rows == [expected(records, ranges) for ranges in tasks], path
        assert (assigns, clients) == ([0], 1), path  # the second task read the pooled queue
        assert checks == [], path


def read_in_turn(
    path: str,
    bootstrap: str,
    tasks: list[list[OffsetRange]],
    between: Callable[[int], None],
) -> tuple[list[list[dict[str, Any]]], list[int], int]:
    """``tasks`` read one after the other by one consumer, as a pooled one reads them
    (``between(n)`` runs after the n-th): the rows of each, before which tasks the consumer
    was assigned, and how many clients it assigned."""
    gc = open_group(path, bootstrap)
    assigns: list[int] = []
    rows: list[list[dict[str, Any]]] = []
    original = gc.assign_all

    def counting(starts: Any) -> None:
        assigns.append(len(rows))
        if not any(c is gc.consumer for c in clients):
            clients.append(gc.consumer)  # held, so that no two clients share an id
        original(starts)

    clients: list[Any] = []

    gc.assign_all = counting  # type: ignore[method-assign]
    try:
        for ranges in tasks:
            out = fetch_ranges(
                gc, ranges, poll_timeout_ms=POLL_MS, fail_on_data_loss=True,
                batch_size=1000, include_headers=False,
            )  # fmt: skip
            got = pa.Table.from_batches(list(out), schema=ARROW_SCHEMA).to_pylist()
            rows.append(sorted(got, key=lambda r: (r["topic"], r["partition"], r["offset"])))
            between(len(rows))
    finally:
        gc.close()
    return rows, assigns, len(clients)
