"""Unit tests for kafka_direct.fetch: reading one offset range on an executor. No broker.

The consumer is the librdkafka-like fake of ``tests/unit/fakes.py``: one partition's log with
data records, transaction markers, aborted records and compacted-away offsets; ``consume(n,
timeout)`` that waits (simulated, on a fake clock) whenever it has fewer than ``n`` events; EOF
events once per arrival at the log end; ``_AUTO_OFFSET_RESET`` when the position is outside the
log. What the fake models of librdkafka and the broker (read_committed filtering, compaction,
retention) is read for real on Apache Kafka in tests/integration (test_real_kafka_behaviour.py,
test_transactions_and_discovery.py, test_compaction.py, test_retention.py); here it drives the
fetch loop's own logic: waits, queue reuse, stale EOFs and skip-ahead around gaps.

Gap cases are the four shapes of SPARK-25005 (docs/architecture.md), plus compaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.consumer import loss, task_consumer
from kafka_direct.consumer.fetch import CONSUME_SLICE_S, PartitionConsumer, fetch_range
from kafka_direct.consumer.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS
from kafka_direct.errors import (
    DataLossError,
    FetchTimeoutError,
    KafkaClientError,
    TopicNotFoundError,
)
from kafka_direct.offsets import OffsetRange
from tests.unit.fakes import (
    PARTITION,
    TOPIC,
    CallRecord,
    CatchingUpLeader,
    Entry,
    FakeClock,
    FakeConsumer,
    FakeLog,
    FakeMessage,
    data,
    default_key,
    default_ts,
    default_value,
)

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
POLL_MS = 10_000  # generous: tests that are not about the timeout must never hit it


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The fetch loop's clock (its wait without progress, and the watermark retries) only moves
    when the fake consumer simulates a wait: no real sleeping."""
    fake = FakeClock()
    monkeypatch.setattr(task_consumer, "time", fake)
    monkeypatch.setattr(loss, "time", fake)
    return fake


@pytest.fixture
def kafka(clock: FakeClock) -> Callable[..., FakeConsumer]:
    def make(log: FakeLog, **kwargs: Any) -> FakeConsumer:
        return FakeConsumer(log, clock=clock, **kwargs)

    return make


def rng(frm: int, until: int) -> OffsetRange:
    return OffsetRange(TOPIC, PARTITION, frm, until)


def fetch_gen(
    target: FakeConsumer | PartitionConsumer,
    frm: int,
    until: int,
    *,
    batch_size: int = 1000,
    poll_timeout_ms: int = POLL_MS,
    fail_on_data_loss: bool = True,
    include_headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    if isinstance(target, PartitionConsumer):
        pc = target
    else:
        pc = PartitionConsumer(target)
        # As a consumer that has read these small records before: its first read is then one
        # consume() call, whose shape the gap tests pin. A first read of unknown sizes starts
        # with one record (test_budget.py, and test_a_first_read_of_unknown_sizes_* below).
        pc.record_bytes = 64.0
    return fetch_range(
        pc,
        rng(frm, until),
        poll_timeout_ms=poll_timeout_ms,
        fail_on_data_loss=fail_on_data_loss,
        batch_size=batch_size,
        include_headers=include_headers,
    )


def read(target: FakeConsumer | PartitionConsumer, frm: int, until: int, **kw: Any) -> list:
    return list(fetch_gen(target, frm, until, **kw))


def drain(gen: Iterator[pa.RecordBatch]) -> tuple[list[pa.RecordBatch], BaseException | None]:
    """Batches yielded before the generator raised, and what it raised."""
    out: list[pa.RecordBatch] = []
    try:
        for batch in gen:
            out.append(batch)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return out, exc
    return out, None


def offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [r for b in batches for r in b.to_pylist()]


def expected_rows(entries: list[Entry]) -> list[dict[str, Any]]:
    return [
        {
            "key": e.key,
            "value": e.value,
            "topic": TOPIC,
            "partition": PARTITION,
            "offset": e.offset,
            "timestamp": EPOCH + timedelta(milliseconds=e.timestamp_ms),
            "timestampType": 0,  # librdkafka CREATE_TIME (1) is Spark's 0
        }
        for e in entries
    ]


def assert_asked_at_most_what_remains(calls: list[CallRecord], until: int, batch_size: int):
    """consume(n) waits for n events: n above what remains stalls every range's last call."""
    for c in calls:
        assert c.position is not None
        assert 1 <= c.n <= until - c.position, (c.n, c.position, until)
        assert c.n <= batch_size


def calls_after_last_data(fake: FakeConsumer) -> list[CallRecord]:
    last = max((i for i, c in enumerate(fake.calls) if c.data_offsets), default=-1)
    return fake.calls[last + 1 :]


# --- exact output ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log_size", "frm", "until", "batch_size", "overdeliver"),
    [
        pytest.param(100, 0, 100, 1000, 0, id="whole-log"),
        pytest.param(100, 0, 100, 7, 0, id="whole-log-small-batches"),
        pytest.param(100, 10, 90, 1000, 0, id="middle-log-continues-after-until"),
        pytest.param(100, 10, 90, 16, 5, id="consumer-returns-past-until"),
        pytest.param(100, 0, 1, 1000, 3, id="single-first-record"),
        pytest.param(100, 99, 100, 1000, 0, id="single-last-record"),
        pytest.param(100, 42, 43, 1000, 9, id="single-middle-record-overdelivered"),
    ],
)
def test_plain_range_yields_every_record_once_in_order(
    kafka: Callable[..., FakeConsumer],
    log_size: int,
    frm: int,
    until: int,
    batch_size: int,
    overdeliver: int,
) -> None:
    log = FakeLog.plain(log_size)
    fake = kafka(log, overdeliver=overdeliver)

    batches = read(fake, frm, until, batch_size=batch_size)

    assert rows(batches) == expected_rows(log.expected(frm, until))
    assert all(b.schema == ARROW_SCHEMA for b in batches)
    assert_asked_at_most_what_remains(fake.calls, until, batch_size)
    assert fake.assigns == [frm]
    if overdeliver:
        # The premise: the consumer really handed out records at or past `until`.
        assert max(fake.delivered) >= until
    else:
        assert all(len(b) <= batch_size for b in batches)
    # A plain range whose records are all there never waits on a consume timeout.
    assert fake.waits == []


def test_plain_range_row_values(kafka: Callable[..., FakeConsumer]) -> None:
    """Spot-check the row mapping against literals, not against the fake's own helpers."""
    fake = kafka(FakeLog([data(7, b"k", b"v", ts=1_234), data(8, None, None, ts=0)]))
    assert rows(read(fake, 7, 9)) == [
        {
            "key": b"k",
            "value": b"v",
            "topic": "orders",
            "partition": 0,
            "offset": 7,
            "timestamp": datetime(1970, 1, 1, 0, 0, 1, 234_000, tzinfo=timezone.utc),
            "timestampType": 0,
        },
        {
            "key": None,
            "value": None,
            "topic": "orders",
            "partition": 0,
            "offset": 8,
            "timestamp": EPOCH,
            "timestampType": 0,
        },
    ]
    assert (default_key(3), default_value(3), default_ts(3)) == (b"k3", b"v3", 1_700_000_000_030)


def test_empty_range_touches_nothing(kafka: Callable[..., FakeConsumer]) -> None:
    fake = kafka(FakeLog.plain(10))
    assert read(fake, 5, 5) == []
    assert fake.assigns == []
    assert fake.calls == []


# --- gaps: SPARK-25005 shapes and compaction ----------------------------------------------

# layout: D data, M control marker, A aborted record, . compacted away.
# max_waits: consume calls that may come up short of n under librdkafka's real semantics (a gap
# inside a range that ends at the log end costs one slice; a range ending on a single marker
# costs nothing, because records + EOF fill n exactly).
GAP_CASES = [
    # (b) the range's first offset is a marker
    pytest.param("MDDDDDDDDD", 0, 10, "read_uncommitted", 1000, 0, id="b-first-is-marker-at-end"),
    pytest.param("MDDDDDDDDDDDDD", 0, 10, "read_uncommitted", 1000, 0, id="b-first-is-marker"),
    pytest.param("AAMDDDDDDD", 0, 10, "read_committed", 1000, 1, id="b-first-is-aborted-txn"),
    # (c) the range's last offset is a marker: the classic stall
    pytest.param("DDDDDDDDDM", 0, 10, "read_uncommitted", 1000, 0, id="c-last-is-marker-at-end"),
    pytest.param("DDDDDDDDDM", 0, 10, "read_uncommitted", 9, 0, id="c-last-marker-eof-next-call"),
    pytest.param("DDDDDDDDDM", 5, 10, "read_uncommitted", 1000, 0, id="c-last-marker-mid-start"),
    pytest.param("DDDDDDDDDMDDD", 0, 10, "read_uncommitted", 1000, 0, id="c-last-is-marker"),
    pytest.param("DDDDDAAAAM", 0, 10, "read_committed", 1000, 1, id="c-ends-in-aborted-txn"),
    pytest.param("DDDDDAAAAM", 0, 10, "read_uncommitted", 1000, 0, id="c-aborted-uncommitted"),
    # (d) a gap in the middle
    pytest.param("DDDMMDDDDD", 0, 10, "read_uncommitted", 1000, 1, id="d-middle-gap-at-end"),
    pytest.param("DDDMMDDDDDDDD", 0, 10, "read_uncommitted", 1000, 0, id="d-middle-gap"),
    pytest.param("DDDMMDDDDDDDD", 0, 10, "read_uncommitted", 3, 0, id="d-middle-gap-small-batch"),
    pytest.param("DDAAAMDDDDDDDD", 0, 10, "read_committed", 1000, 0, id="d-aborted-txn-middle"),
    # ranges that hold no record at all
    pytest.param("DDMMMDD", 2, 5, "read_uncommitted", 1000, 0, id="only-markers"),
    pytest.param("DDMMM", 2, 5, "read_uncommitted", 1000, 1, id="only-markers-at-end"),
    pytest.param("DAAAMDD", 1, 5, "read_committed", 1000, 1, id="only-aborted-txn"),
    # compaction
    pytest.param("D..D.DD...D", 0, 11, "read_uncommitted", 1000, 1, id="compacted-whole-log"),
    pytest.param("D..D.DD...D", 1, 10, "read_uncommitted", 1000, 1, id="compacted-holes-at-ends"),
    pytest.param("D..D.DD...D", 1, 10, "read_uncommitted", 2, 0, id="compacted-small-batch"),
    pytest.param("DD....DD", 2, 6, "read_uncommitted", 1000, 1, id="compacted-range-all-hole"),
    pytest.param(
        "D.D.D.D.D.DDDDDD", 0, 10, "read_uncommitted", 1000, 0, id="compacted-every-other"
    ),
]


@pytest.mark.parametrize(
    ("layout", "frm", "until", "isolation", "batch_size", "max_waits"), GAP_CASES
)
def test_gaps_yield_exactly_the_data_and_do_not_stall(
    kafka: Callable[..., FakeConsumer],
    layout: str,
    frm: int,
    until: int,
    isolation: str,
    batch_size: int,
    max_waits: int,
) -> None:
    log = FakeLog.from_layout(layout)
    fake = kafka(log, isolation_level=isolation)

    batches = read(fake, frm, until, batch_size=batch_size)

    assert rows(batches) == expected_rows(log.expected(frm, until, isolation))
    assert_asked_at_most_what_remains(fake.calls, until, batch_size)
    # The read ends on the evidence it gets (a record past `until`, or EOF), never by waiting
    # out a timeout: no call after the last record came back short. The old stall (waiting for
    # the marker's offset until pollTimeoutMs) fails this, and the waits bound below.
    if fake.delivered:
        assert not any(c.waited for c in calls_after_last_data(fake)), fake.calls
    assert len(fake.waits) <= max_waits, fake.calls
    assert sum(fake.waits) <= max_waits * CONSUME_SLICE_S


def test_range_ending_on_marker_finishes_on_eof_without_waiting(
    kafka: Callable[..., FakeConsumer],
) -> None:
    """SPARK-25005 (c): the last offset of the range is a commit marker, nothing after it."""
    log = FakeLog.from_layout("D" * 9 + "M")
    fake = kafka(log)

    assert offsets(read(fake, 0, 10)) == list(range(9))

    assert fake.waits == []
    (call,) = fake.calls
    assert call.n == 10  # records + EOF fill the request exactly; more would wait a slice
    assert [m.error().code() for m in call.events if m.error()] == [KafkaError._PARTITION_EOF]


@pytest.mark.parametrize(
    ("layout", "isolation"),
    [
        pytest.param("DDDDD" + "M" * 10 + "DDDDD", "read_uncommitted", id="markers"),
        pytest.param("DDDDD" + "A" * 9 + "M" + "DDDDD", "read_committed", id="aborted-txn"),
    ],
)
def test_whole_consume_batch_of_invisible_records(
    kafka: Callable[..., FakeConsumer], layout: str, isolation: str
) -> None:
    """SPARK-25005 (a): a fetch that holds only control (or aborted) records returns nothing.

    An empty ``consume`` is not the end of the range: keep going until EOF or ``until``.
    """
    log = FakeLog.from_layout(layout)
    fake = kafka(log, isolation_level=isolation, fetch_span=5, fetches_per_call=1)

    batches = read(fake, 0, 20)

    assert offsets(batches) == [0, 1, 2, 3, 4, 15, 16, 17, 18, 19]
    assert any(c.events == [] for c in fake.calls), "premise: a consume came back empty"
    assert_asked_at_most_what_remains(fake.calls, 20, 1000)


# --- batch size --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout",
    [pytest.param("D" * 10_000, id="plain"), pytest.param("DDDDM" * 2_500, id="transactional")],
)
def test_batches_never_exceed_batch_size(kafka: Callable[..., FakeConsumer], layout: str) -> None:
    log = FakeLog.from_layout(layout)
    fake = kafka(log)

    batches = read(fake, 0, 10_000, batch_size=1000)

    assert all(0 < len(b) <= 1000 for b in batches)
    assert offsets(batches) == [e.offset for e in log.expected(0, 10_000)]
    assert sum(len(b) for b in batches) == len(log.expected(0, 10_000))
    assert_asked_at_most_what_remains(fake.calls, 10_000, 1000)


# --- data loss -------------------------------------------------------------------------------


def _loss_message_parts(exc: BaseException) -> str:
    assert isinstance(exc, DataLossError)
    assert (exc.topic, exc.partition) == (TOPIC, PARTITION)
    text = str(exc)
    assert "orders-0" in text
    assert "failOnDataLoss" in text
    return text


def test_aged_out_start_fails_when_fail_on_data_loss(kafka: Callable[..., FakeConsumer]) -> None:
    log = FakeLog.plain(100)
    log.delete_before(50)
    fake = kafka(log)

    with pytest.raises(DataLossError) as info:
        read(fake, 0, 100, fail_on_data_loss=True)

    text = _loss_message_parts(info.value)
    assert "offset 0 is out of range" in text
    assert "[50, 100)" in text


def test_aged_out_start_skips_to_log_start_when_not_failing(
    kafka: Callable[..., FakeConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    log = FakeLog.plain(100)
    log.delete_before(50)
    fake = kafka(log)

    with caplog.at_level(logging.WARNING, logger="kafka_direct.consumer.fetch"):
        batches = read(fake, 0, 100, fail_on_data_loss=False)

    assert rows(batches) == expected_rows(log.expected(50, 100))
    assert fake.assigns == [0, 50]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "orders-0" in warning.getMessage()
    assert "Skipping 50 offsets" in warning.getMessage()
    assert "failOnDataLoss=false" in warning.getMessage()


@pytest.mark.parametrize("fail", [True, False])
def test_retention_between_prefetch_and_fetch_keeps_the_prefetched_records(
    kafka: Callable[..., FakeConsumer], caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    """Records already in the local queue arrive in the same consume batch as the
    ``_AUTO_OFFSET_RESET`` for the position after them: they are data, not loss."""
    log = FakeLog.plain(100)
    fake = kafka(log, fetch_span=20)
    pc = PartitionConsumer(fake)
    assert offsets(read(pc, 0, 10)) == list(range(10))
    assert [m.offset() for m in fake.queued()] == list(range(10, 20))  # premise: prefetched
    log.delete_before(60)

    with caplog.at_level(logging.WARNING, logger="kafka_direct.consumer.fetch"):
        batches, exc = drain(fetch_gen(pc, 10, 100, fail_on_data_loss=fail))

    if fail:
        assert offsets(batches) == list(range(10, 20))
        text = _loss_message_parts(exc)  # type: ignore[arg-type]
        assert "offset 20 is out of range" in text
    else:
        assert exc is None
        assert offsets(batches) == list(range(10, 20)) + list(range(60, 100))
        assert "Skipping 40 offsets" in caplog.text
    assert pc.next_offset == (None if fail else 100)


@pytest.mark.parametrize(
    ("new_layout", "frm", "until", "kept", "detail"),
    [
        pytest.param("D" * 40, 0, 100, list(range(40)), "log now ends at 40", id="ends-inside"),
        pytest.param("D" * 30, 50, 100, [], "offset 50 is out of range", id="starts-past-end"),
        pytest.param("D" * 30, 30, 100, [], "log now ends at 30", id="starts-at-new-end"),
    ],
)
@pytest.mark.parametrize("fail", [True, False])
def test_log_recreated_smaller(
    kafka: Callable[..., FakeConsumer],
    caplog: pytest.LogCaptureFixture,
    new_layout: str,
    frm: int,
    until: int,
    kept: list[int],
    detail: str,
    fail: bool,
) -> None:
    """The range was planned on the old topic; the new one ends before ``until``."""
    log = FakeLog.plain(200)
    log.recreate(new_layout)
    fake = kafka(log)

    with caplog.at_level(logging.WARNING, logger="kafka_direct.consumer.fetch"):
        batches, exc = drain(fetch_gen(fake, frm, until, fail_on_data_loss=fail))

    assert offsets(batches) == kept
    if fail:
        assert detail in _loss_message_parts(exc)  # type: ignore[arg-type]
    else:
        assert exc is None
        assert detail in caplog.text
        assert "failOnDataLoss=false" in caplog.text
    # The leader was asked SHORT_LOG_ANSWERS times, SHORT_LOG_RETRY_S apart, before the short
    # log was believed (a new leader's log end can lag: KAFKA-7703), after an empty read that
    # shows that nothing more is queued (an EOF short of the range is checked only then: mostly
    # it is stale, see short_log_suspect); nothing was read after the verdict.
    assert fake.watermark_calls == loss.SHORT_LOG_ANSWERS
    spread = (loss.SHORT_LOG_ANSWERS - 1) * loss.SHORT_LOG_RETRY_S
    assert sum(fake.waits) <= spread + 4 * CONSUME_SLICE_S  # reads wait a slice at a time


@pytest.mark.parametrize("lagging", [1, loss.SHORT_LOG_ANSWERS - 1])
@pytest.mark.parametrize("fail", [True, False])
def test_a_log_end_that_lags_while_a_leader_moves_loses_nothing(
    clock: FakeClock, lagging: int, fail: bool
) -> None:
    """[0, 10) is planned; the fetcher meets an EOF at 6 and the new leader says 6 too, for a
    while. Asked again, it says 10: every record is read, nothing is judged lost."""
    fake = CatchingUpLeader(FakeLog.plain(6), behind=4, lagging=lagging, clock=clock)
    skipped: list[tuple[OffsetRange, int, int]] = []
    pc = PartitionConsumer(fake)
    pc.record_bytes = 64.0

    batches = list(
        fetch_range(
            pc, rng(0, 10), poll_timeout_ms=POLL_MS, fail_on_data_loss=fail, batch_size=1000,
            include_headers=False, on_skip=lambda *a: skipped.append(a),
        )
    )  # fmt: skip

    assert offsets(batches) == list(range(10))
    assert skipped == []
    # The records that came after the last lagging answer settled it: no more asking.
    assert fake.watermark_calls == lagging


@pytest.mark.parametrize("fail", [True, False])
def test_a_log_end_that_stays_short_is_judged_after_the_leader_said_so_each_time(
    kafka: Callable[..., FakeConsumer], clock: FakeClock, fail: bool
) -> None:
    """The same EOF at 6, but the log really ends there (the topic was recreated): after
    SHORT_LOG_ANSWERS answers, SHORT_LOG_RETRY_S apart, the data-loss policy applies."""
    fake = kafka(FakeLog.plain(6))
    skipped: list[tuple[OffsetRange, int, int]] = []
    pc = PartitionConsumer(fake)
    pc.record_bytes = 64.0
    start = clock.now

    batches, exc = drain(
        fetch_range(
            pc, rng(0, 10), poll_timeout_ms=POLL_MS, fail_on_data_loss=fail, batch_size=1000,
            include_headers=False, on_skip=lambda *a: skipped.append(a),
        )
    )  # fmt: skip

    assert offsets(batches) == list(range(6))
    if fail:
        assert isinstance(exc, DataLossError)
        assert "log now ends at 6" in str(exc)
        assert skipped == []
    else:
        assert exc is None
        assert skipped == [(rng(0, 10), 6, 10)]
    assert fake.watermark_calls == loss.SHORT_LOG_ANSWERS
    assert clock.now - start >= (loss.SHORT_LOG_ANSWERS - 1) * loss.SHORT_LOG_RETRY_S


def test_the_answers_about_a_short_log_fit_in_a_short_poll_timeout(
    kafka: Callable[..., FakeConsumer], clock: FakeClock
) -> None:
    """With pollTimeoutMs below the answers' usual spread, they come closer together: the
    verdict is the data-loss policy's, not a FetchTimeoutError."""
    fake = kafka(FakeLog.plain(6))
    start = clock.now

    with pytest.raises(DataLossError, match="log now ends at 6"):
        read(fake, 0, 10, poll_timeout_ms=300)

    assert fake.watermark_calls == loss.SHORT_LOG_ANSWERS
    assert clock.now - start <= 0.3 + 3 * CONSUME_SLICE_S


@pytest.mark.parametrize("lagging", [1, loss.SHORT_LOG_ANSWERS - 1])
def test_an_out_of_range_position_above_a_lagging_log_end_loses_nothing(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, lagging: int
) -> None:
    """The range [7, 10) starts past the new leader's lagging log end (6): librdkafka reports
    the position out of range. Asked again, the leader has caught up: read on from 7."""
    fake = CatchingUpLeader(FakeLog.plain(6), behind=4, lagging=lagging, clock=clock)

    batches = read(fake, 7, 10, fail_on_data_loss=True)

    assert offsets(batches) == [7, 8, 9]
    assert fake.watermark_calls == lagging + 1
    assert fake.assigns == [7, 7]


def test_an_out_of_range_position_above_the_log_end_is_lost_after_the_answers_agree(
    kafka: Callable[..., FakeConsumer],
) -> None:
    fake = kafka(FakeLog.plain(6))

    with pytest.raises(DataLossError, match=r"offset 7 is out of range.*\[0, 6\)"):
        read(fake, 7, 10)
    assert fake.watermark_calls == loss.SHORT_LOG_ANSWERS


def test_consumer_stopped_by_out_of_range_is_repositioned_on_retry(
    kafka: Callable[..., FakeConsumer],
) -> None:
    """After ``_AUTO_OFFSET_RESET`` librdkafka stops fetching; reusing its queue as-is would
    turn a clear DataLossError into a FetchTimeoutError on the next attempt."""
    log = FakeLog.plain(100)
    log.delete_before(50)
    fake = kafka(log)
    pc = PartitionConsumer(fake)

    for _ in range(2):
        with pytest.raises(DataLossError):
            read(pc, 0, 100, poll_timeout_ms=300)
    assert fake.assigns == [0, 0]


def test_a_read_closed_at_the_batch_that_carried_out_of_range_leaves_no_stopped_queue(
    kafka: Callable[..., FakeConsumer],
) -> None:
    """Records and ``_AUTO_OFFSET_RESET`` come out of one read (retention passed the fetcher
    while earlier records were queued); the caller stops at that batch, so the consumer goes
    back to the pool. The next range starting where it stopped must see the loss, not wait its
    poll timeout on a queue librdkafka stopped filling."""
    log = FakeLog.plain(10)
    fake = kafka(log, fetch_span=5)
    consumes = 0

    def retention_between_fetches() -> None:
        nonlocal consumes
        consumes += 1
        if consumes == 2:
            log.delete_before(8)

    fake.on_consume = retention_between_fetches
    pc = PartitionConsumer(fake)
    reading = fetch_gen(pc, 0, 10)
    next(reading)
    reading.close()
    assert pc.next_offset is None
    with pytest.raises(DataLossError):
        read(pc, 5, 10, poll_timeout_ms=300)


# --- poll timeout ----------------------------------------------------------------------------


def test_stalled_log_below_until_raises_fetch_timeout(
    kafka: Callable[..., FakeConsumer], clock: FakeClock
) -> None:
    """The log stops at 50 while the broker's watermark says 100: records are promised but
    never arrive, so the read gives up after pollTimeoutMs without progress."""
    fake = kafka(FakeLog.plain(50), watermarks=(0, 100))

    batches, exc = drain(fetch_gen(fake, 0, 100, poll_timeout_ms=300))

    assert offsets(batches) == list(range(50))
    assert isinstance(exc, FetchTimeoutError)
    assert "kafkaConsumer.pollTimeoutMs" in str(exc)
    assert "offset 50 of orders-0" in str(exc)
    assert exc.retriable
    # It gave up only after at least the timeout of (simulated) waiting, and did not spin: one
    # empty read, after which the leader said the records exist; then the wait for them.
    idle = [c for c in fake.calls if not c.events]
    assert sum(c.timeout for c in idle) >= 0.3
    assert len(idle) <= 0.3 / CONSUME_SLICE_S + 2
    assert fake.watermark_calls == 1


def test_paused_broker_raises_fetch_timeout(kafka: Callable[..., FakeConsumer]) -> None:
    fake = kafka(FakeLog.plain(100))
    fake.paused = True

    with pytest.raises(FetchTimeoutError, match=r"kafkaConsumer\.pollTimeoutMs"):
        read(fake, 0, 100, poll_timeout_ms=300)
    assert 0.3 <= sum(fake.waits) <= 0.3 + 2 * CONSUME_SLICE_S


def test_slow_trickle_is_progress_not_a_timeout(kafka: Callable[..., FakeConsumer]) -> None:
    """pollTimeoutMs bounds time *without progress*: 50 slow fetches of one record each take
    far longer than the timeout in total, and must still succeed."""
    fake = kafka(FakeLog.plain(50), fetch_span=1, fetches_per_call=1)

    batches = read(fake, 0, 50, poll_timeout_ms=300)

    assert offsets(batches) == list(range(50))
    assert sum(fake.waits) > 0.3  # premise


def test_time_spent_downstream_is_not_poll_time(
    kafka: Callable[..., FakeConsumer], clock: FakeClock
) -> None:
    """While Spark works on a yielded batch the generator is suspended; that time must not
    count against pollTimeoutMs (Spark gives every poll the full timeout)."""
    fake = kafka(FakeLog.plain(100), fetch_span=50, fetches_per_call=1)
    gen = fetch_gen(fake, 0, 100, poll_timeout_ms=300)

    first = next(gen)
    clock.advance(30.0)  # a slow sink
    fake.held_rounds = 1  # and the next fetch is still in flight: one short consume
    rest = list(gen)

    assert offsets([first, *rest]) == list(range(100))


# --- PartitionConsumer position tracking -----------------------------------------------------


def test_consecutive_ranges_reuse_the_queue(kafka: Callable[..., FakeConsumer]) -> None:
    fake = kafka(FakeLog.plain(300))
    pc = PartitionConsumer(fake)

    got = [offsets(read(pc, a, b)) for a, b in [(0, 100), (100, 200), (200, 300)]]

    assert got == [list(range(0, 100)), list(range(100, 200)), list(range(200, 300))]
    assert fake.assigns == [0]
    assert pc.next_offset == 300


@pytest.mark.parametrize(
    ("ranges", "assigns"),
    [
        pytest.param([(0, 100), (50, 80)], [0, 50], id="backwards"),
        pytest.param([(0, 100), (120, 150)], [0], id="skip-ahead-reads-forward"),
        pytest.param([(0, 100), (120, 130), (150, 200)], [0], id="skips-ahead"),
        pytest.param([(0, 100), (150, 200), (120, 130)], [0, 120], id="skip-then-back"),
        pytest.param([(0, 100), (100, 150), (100, 150)], [0, 100], id="re-read"),
    ],
)
def test_non_consecutive_ranges_reassign(
    kafka: Callable[..., FakeConsumer],
    ranges: list[tuple[int, int]],
    assigns: list[int],
) -> None:
    log = FakeLog.plain(200)
    fake = kafka(log)
    pc = PartitionConsumer(fake)

    for a, b in ranges:
        assert rows(read(pc, a, b)) == expected_rows(log.expected(a, b))
    assert fake.assigns == assigns


@pytest.fixture
def small_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fake's records are ~12 bytes: this allows a skip of ~170 of them.
    monkeypatch.setattr(task_consumer, "SKIP_AHEAD_BYTES", 2_000)


@pytest.mark.usefixtures("small_skip")
@pytest.mark.parametrize("batch_size", [1, 7, 1000])
@pytest.mark.parametrize("layout", ["D" * 300, "DDM" * 100, "DAM" * 100])
def test_skip_ahead_drops_exactly_the_records_before_the_range(
    kafka: Callable[..., FakeConsumer], batch_size: int, layout: str
) -> None:
    """A range ahead of the consumer is read forward: whatever the consume batches look like
    (all below the range, straddling it, markers and aborted records in the skipped part), the
    rows are exactly the range's, and the queue is never thrown away."""
    log = FakeLog.from_layout(layout)
    fake = kafka(log, fetch_span=25)
    pc = PartitionConsumer(fake)

    for a, b in [(0, 60), (110, 150), (150, 170), (230, 300)]:
        got = read(pc, a, b, batch_size=batch_size)
        assert rows(got) == expected_rows(log.expected(a, b)), (a, b)
    if "M" not in layout:
        # (A range ending in a marker can take records past its end: the next one re-assigns.)
        assert fake.assigns == [0]


@pytest.mark.usefixtures("small_skip")
def test_a_range_too_far_ahead_reassigns(kafka: Callable[..., FakeConsumer]) -> None:
    log = FakeLog.plain(400)
    fake = kafka(log)
    pc = PartitionConsumer(fake)
    assert offsets(read(pc, 0, 10)) == list(range(10))
    assert 50 <= pc.skip_ahead_limit() <= 250  # premise: ~12-byte records, 2,000 bytes

    assert offsets(read(pc, 300, 310)) == list(range(300, 310))
    assert fake.assigns == [0, 300]


def test_no_skip_ahead_before_the_consumer_has_read_anything(
    kafka: Callable[..., FakeConsumer],
) -> None:
    fake = kafka(FakeLog.plain(100))
    pc = PartitionConsumer(fake)
    pc.position_at(TOPIC, PARTITION, 0)
    assert pc.skip_ahead_limit() == 0
    assert offsets(read(pc, 10, 20)) == list(range(10, 20))
    assert fake.assigns == [0, 10]


@pytest.mark.parametrize(
    ("record_bytes", "limit"),
    [(None, 0), (100.0, 83_886), (10.0, 100_000), (0.0, 100_000), (8 * 1024 * 1024, 1)],
)
def test_skip_ahead_limit(
    kafka: Callable[..., FakeConsumer], record_bytes: Any, limit: int
) -> None:
    pc = PartitionConsumer(kafka(FakeLog.plain(1)))
    pc.record_bytes = record_bytes
    assert pc.skip_ahead_limit() == limit


def test_skip_ahead_over_a_stale_eof(kafka: Callable[..., FakeConsumer]) -> None:
    """[0, 100) leaves EOF(100) queued; the log grows and the next range starts at 150."""
    log = FakeLog.plain(100)
    fake = kafka(log)
    pc = PartitionConsumer(fake)
    assert offsets(read(pc, 0, 100)) == list(range(100))
    log.append_layout("D" * 100)

    assert rows(read(pc, 150, 200)) == expected_rows(log.expected(150, 200))
    assert fake.assigns == [0]


def test_records_taken_past_until_force_a_reassign(kafka: Callable[..., FakeConsumer]) -> None:
    """A gap before ``until`` lets consume(n) return records past it. They are off the queue,
    so the next range cannot reuse the queue: it must reposition or lose them."""
    log = FakeLog.from_layout("D" * 95 + "M" * 5 + "D" * 100)
    fake = kafka(log)
    pc = PartitionConsumer(fake)

    assert offsets(read(pc, 0, 100)) == list(range(95))
    assert max(fake.delivered) >= 100  # premise
    assert offsets(read(pc, 100, 200)) == list(range(100, 200))
    assert fake.assigns == [0, 100]


@pytest.mark.parametrize("fetch_lag", [0, 1, 3])
@pytest.mark.parametrize("until2", [150, 200])
def test_stale_eof_does_not_end_the_next_range(
    kafka: Callable[..., FakeConsumer], fetch_lag: int, until2: int
) -> None:
    """consume(100) of [0, 100) is full before the EOF(100) behind it; the next range gets that
    EOF first although the log has grown, maybe alone if the new data is still in flight."""
    log = FakeLog.plain(100)
    fake = kafka(log)
    pc = PartitionConsumer(fake)
    assert offsets(read(pc, 0, 100)) == list(range(100))
    (stale,) = fake.queued()
    assert (stale.error().code(), stale.offset()) == (KafkaError._PARTITION_EOF, 100)  # premise

    log.append_layout("D" * 100)
    fake.held_rounds = fetch_lag
    batches = read(pc, 100, until2)

    assert rows(batches) == expected_rows(log.expected(100, until2))
    assert fake.assigns == [0]
    # Only an EOF that arrives alone, and is followed by a read that brings nothing, raises the
    # "did the log shrink?" question: with the new data one fetch round late, the read after
    # the EOF brings it, and the broker is not asked (short_log_suspect).
    assert fake.watermark_calls == (1 if fetch_lag > 1 else 0)


def test_stale_eof_before_a_gap_range(kafka: Callable[..., FakeConsumer]) -> None:
    """[0, 9) leaves EOF(10) queued behind marker 9; [9, 10) is that marker alone."""
    log = FakeLog.from_layout("D" * 9 + "M")
    fake = kafka(log)
    pc = PartitionConsumer(fake)

    assert offsets(read(pc, 0, 9)) == list(range(9))
    assert offsets(read(pc, 9, 10)) == []
    assert fake.assigns == [0]
    assert fake.waits == []


def test_range_ending_in_a_gap_hands_its_queue_to_the_next_range(
    kafka: Callable[..., FakeConsumer],
) -> None:
    """EOF(10) proves [9, 10) is a gap, so the consumer stands at 10: the next micro-batch's
    range [10, 20) reuses the queue instead of re-assigning (and refetching)."""
    log = FakeLog.from_layout("D" * 9 + "M")
    fake = kafka(log)
    pc = PartitionConsumer(fake)

    assert offsets(read(pc, 0, 10)) == list(range(9))
    assert pc.next_offset == 10
    log.append_layout("D" * 10)
    assert offsets(read(pc, 10, 20)) == list(range(10, 20))
    assert fake.assigns == [0]


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (KafkaError._TRANSPORT, KafkaClientError),
        (KafkaError._ALL_BROKERS_DOWN, KafkaClientError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicNotFoundError),
    ],
)
def test_error_event_is_translated(
    kafka: Callable[..., FakeConsumer], code: int, cls: type[KafkaClientError]
) -> None:
    fake = kafka(FakeLog.plain(100))
    pc = PartitionConsumer(fake)
    pc.position_at(TOPIC, PARTITION, 0)
    fake.inject(code)

    with pytest.raises(KafkaClientError) as info:
        read(pc, 0, 100)

    assert type(info.value) is cls
    assert not isinstance(info.value, KafkaException)
    assert info.value.code == KafkaError(code).name()
    assert "orders-0" in str(info.value)


@pytest.mark.parametrize("where", ["assign", "consume", "watermarks"])
def test_client_exceptions_are_translated(kafka: Callable[..., FakeConsumer], where: str) -> None:
    fake = kafka(FakeLog.plain(40))  # [0, 100) hits EOF(40) and asks for the watermarks
    # A failed watermark request that can pass is asked again (test_fetch_native): use one
    # that cannot there.
    code = KafkaError.TOPIC_AUTHORIZATION_FAILED if where == "watermarks" else KafkaError._TRANSPORT
    exc = KafkaException(KafkaError(code))
    setattr(fake, f"raise_on_{where}", exc)

    with pytest.raises(KafkaClientError) as info:
        read(fake, 0, 100)

    assert info.value.code == KafkaError(code).name()
    assert info.value.__cause__ is exc
    assert "orders-0" in str(info.value)


# --- headers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("include_headers", [True, False])
def test_headers(kafka: Callable[..., FakeConsumer], include_headers: bool) -> None:
    log = FakeLog(
        [
            data(0, headers=[("h1", b"x"), ("h2", None), ("h1", b"again")]),
            data(1),
            data(2, headers=[]),
            data(3, None, None, headers=[("only", b"")]),
        ]
    )
    fake = kafka(log)

    batches = read(fake, 0, 4, include_headers=include_headers)

    if include_headers:
        assert all(b.schema == ARROW_SCHEMA_WITH_HEADERS for b in batches)
        assert [r["headers"] for r in rows(batches)] == [
            [
                {"key": "h1", "value": b"x"},
                {"key": "h2", "value": None},
                {"key": "h1", "value": b"again"},
            ],
            None,  # Spark gives null, not [], to a record without headers
            None,
            [{"key": "only", "value": b""}],
        ]
    else:
        assert all(b.schema == ARROW_SCHEMA for b in batches)
    base = [{k: v for k, v in r.items() if k != "headers"} for r in rows(batches)]
    assert base == expected_rows(log.expected(0, 4))


def test_out_of_range_error_for_a_position_that_is_readable_again_loses_nothing(kafka) -> None:
    """The error arrived, but by the time the watermarks are asked the log covers the position
    again (a recreated topic refilled): read on from there, report no loss."""
    fake = kafka(FakeLog.plain(30))
    fake.inject(KafkaError._AUTO_OFFSET_RESET, 0)  # stale error queued before any data
    got = [
        o for b in read(fake, 0, 30, fail_on_data_loss=True) for o in b.column("offset").to_pylist()
    ]
    assert got == list(range(30))


def test_eof_consumed_with_a_complete_range_is_remembered_by_the_pooled_consumer(
    kafka: Callable[..., FakeConsumer],
) -> None:
    """Regression (review): [0, 7) of data 0-2, marker 3, data 4-6, marker 7 consumed the EOF(8)
    together with its last records; the next range [7, 8) reused the queue, waited for an EOF
    that librdkafka never sends twice, and failed with FetchTimeoutError after pollTimeoutMs."""
    fake = kafka(FakeLog.from_layout("DDDMDDDM"))
    pc = PartitionConsumer(fake)
    assert offsets(read(pc, 0, 7)) == [0, 1, 2, 4, 5, 6]
    assert offsets(read(pc, 7, 8)) == []  # the final marker alone: no wait, no timeout
    assert sum(fake.waits) < POLL_MS / 1000


def test_a_header_key_that_is_not_utf8_fails_naming_the_record_not_with_a_system_error(
    kafka: Callable[..., FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # confluent-kafka's Message.headers() raises SystemError on such a key; the byte budget
    # (which counts headers) and the rows' builder both meet it, and only the rows name it.
    plain = FakeMessage.headers

    def headers(message: FakeMessage) -> Any:
        if message.offset() == 3:
            raise SystemError("<built-in method headers> returned a result with an exception set")
        return plain(message)

    monkeypatch.setattr(FakeMessage, "headers", headers)
    fake = kafka(FakeLog([data(o) for o in range(6)]))
    batches, exc = drain(fetch_gen(fake, 0, 6, include_headers=True))
    assert isinstance(exc, KafkaClientError), repr(exc)
    assert "offset 3" in str(exc) and "fastPath.enabled" in str(exc)
    assert offsets(batches) == []  # the batch that holds it is not yielded in part
