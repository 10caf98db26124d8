"""The fetch loop over a fast-path consumer (``fetch._take_native``), with the extension's
answers scripted: the branches the embedded broker cannot reach (it never reports an offset
out of range) and the bookkeeping around each answer. The C side is compared with the Python
path on the real broker in ``tests/integration/test_native_read.py``."""

from __future__ import annotations

from collections import deque
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError

from kafka_direct.consumer import loss, native, task_consumer
from kafka_direct.consumer.fetch import PartitionConsumer, fetch_range
from kafka_direct.consumer.rows import ARROW_SCHEMA, TIMESTAMP_US
from kafka_direct.errors import DataLossError, FetchTimeoutError, KafkaClientError
from kafka_direct.offsets import OffsetRange
from tests.unit.fakes import FakeClock

Answer = tuple[Any, ...] | None


class ScriptedNative(native.NativeConsumer):
    """A ``NativeConsumer`` whose extension answers from a script: ``consume_batch`` answers
    are (offsets of the records in range, last, beyond, eof, error), or None for "nothing"."""

    def __init__(self, answers: list[Answer], watermarks: tuple[int, int] = (0, 0)) -> None:
        self.answers = deque(answers)
        self.watermarks = watermarks
        self.assigned: list[int] = []
        self.asked: list[tuple[int, int, int]] = []

    def assign(self, partitions: list[Any]) -> None:
        self.assigned.append(partitions[0].offset)

    def get_watermark_offsets(
        self, partition: Any, timeout: float = 5.0, cached: bool = False
    ) -> tuple[int, int]:
        return self.watermarks

    def consume_batch(
        self,
        topic: str,
        partition: int,
        nxt: int,
        until: int,
        n: int,
        timeout_s: float,
        headers: bool = False,
        max_bytes: int = 0,
    ) -> Any:
        self.asked.append((nxt, until, n))
        if not self.answers:
            raise AssertionError("the fetch loop asked for more than the script holds")
        answer = self.answers.popleft()
        if answer is None:
            return None
        offsets, last, beyond, eof, error = answer
        batch = _batch(topic, partition, offsets) if offsets else None
        return native.NativeBatch(batch, last, beyond, eof, error)

    def close(self) -> None:
        pass


def _batch(topic: str, partition: int, offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([b"k"] * n, pa.binary()),
            pa.array([b"value"] * n, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([0] * n, TIMESTAMP_US),
            pa.array([0] * n, pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(task_consumer.time, "monotonic", fake.monotonic)
    return fake


def _read(
    consumer: ScriptedNative,
    frm: int,
    until: int,
    fail: bool = True,
    on_skip: Any = None,
) -> list[int]:
    pc = PartitionConsumer(consumer)
    batches = fetch_range(
        pc,
        OffsetRange("orders", 0, frm, until),
        poll_timeout_ms=1000,
        fail_on_data_loss=fail,
        batch_size=100,
        include_headers=False,
        on_skip=on_skip,
    )
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_records_then_a_record_past_the_end_finish_the_range() -> None:
    consumer = ScriptedNative([([0, 1, 2], 2, False, None, None), ([3, 4], 6, True, None, None)])
    assert _read(consumer, 0, 5) == [0, 1, 2, 3, 4]
    assert consumer.asked == [(0, 5, 5), (3, 5, 2)]


def test_a_gap_at_the_end_finishes_on_the_eof_event() -> None:
    # [0, 5) whose offsets 3 and 4 are transaction markers: the log ends at 5.
    consumer = ScriptedNative([([0, 1, 2], 2, False, 5, None)])
    assert _read(consumer, 0, 5) == [0, 1, 2]


def test_a_stale_queue_position_skips_ahead_without_moving_backwards() -> None:
    # The pooled queue stood at 0; the range starts at 3: records before 3 are dropped in C.
    consumer = ScriptedNative([(None, 2, False, None, None), ([3, 4], 4, False, None, None)])
    assert _read(consumer, 3, 5) == [3, 4]
    assert consumer.asked == [(3, 5, 2), (3, 5, 2)]


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "skip"])
def test_out_of_range_goes_through_the_data_loss_policy(fail: bool) -> None:
    # Offset 10 aged out; the broker now holds [20, 30).
    consumer = ScriptedNative(
        [(None, -1, False, -1, None), ([20, 21], 21, False, None, None)], watermarks=(20, 30)
    )
    if fail:
        with pytest.raises(DataLossError, match=r"offset 10 is out of range.*\[20, 30\)"):
            _read(consumer, 10, 22, fail=True)
    else:
        skipped: list[tuple[OffsetRange, int, int]] = []
        read = _read(consumer, 10, 22, fail=False, on_skip=lambda *a: skipped.append(a))
        assert read == [20, 21]
        assert consumer.assigned == [10, 20]  # re-assigned where the data resumes
        assert skipped == [(OffsetRange("orders", 0, 10, 22), 10, 20)]


def test_an_error_event_is_raised_translated() -> None:
    consumer = ScriptedNative(
        [(None, -1, False, None, (KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"))]
    )
    with pytest.raises(KafkaClientError, match=r"not allowed \(TOPIC_AUTHORIZATION_FAILED\)"):
        _read(consumer, 0, 5)


def test_nothing_for_the_poll_timeout_is_a_fetch_timeout(clock: FakeClock) -> None:
    class Slow(ScriptedNative):
        def consume_batch(self, *args: Any, **kwargs: Any) -> Any:
            clock.advance(0.2)  # one consume slice
            return super().consume_batch(*args, **kwargs)

    consumer = Slow([None] * 6)
    with pytest.raises(FetchTimeoutError, match="waiting for offset 0 of orders-0"):
        _read(consumer, 0, 5)


class MovingLeader(ScriptedNative):
    """Watermark requests fail with ``errors`` (a leader moving), then answer."""

    def __init__(self, answers: list[Answer], errors: list[int], watermarks: tuple[int, int]):
        super().__init__(answers, watermarks)
        self.errors = deque(errors)

    def get_watermark_offsets(
        self, partition: Any, timeout: float = 5.0, cached: bool = False
    ) -> tuple[int, int]:
        if self.errors:
            from confluent_kafka import KafkaException

            raise KafkaException(KafkaError(self.errors.popleft()))
        return self.watermarks


@pytest.mark.parametrize(
    "error",
    [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._UNKNOWN_PARTITION],
    ids=["not-leader", "unknown-partition"],
)
def test_a_moving_leader_is_asked_again_before_anything_is_judged_lost(
    error: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loss.time, "sleep", lambda s: None)
    # Out of range at 10 while the leader moves; once it answers, [20, 30) is what remains.
    consumer = MovingLeader(
        [(None, -1, False, -1, None), ([20, 21], 21, False, None, None)],
        errors=[error, error],
        watermarks=(20, 30),
    )
    with pytest.raises(DataLossError, match=r"offset 10 is out of range.*\[20, 30\)"):
        _read(consumer, 10, 22, fail=True)
    assert not consumer.errors


def test_a_watermark_error_that_does_not_pass_fails_the_read(clock: FakeClock) -> None:
    consumer = MovingLeader(
        [(None, -1, False, -1, None)],
        errors=[KafkaError.TOPIC_AUTHORIZATION_FAILED],
        watermarks=(20, 30),
    )
    with pytest.raises(KafkaClientError, match="TOPIC_AUTHORIZATION_FAILED"):
        _read(consumer, 10, 22, fail=False)
