"""How a write task's final flush waits (``kafka_direct.producer.batch_producer``): short slices
first, so a small task's flush ends soon after its last acknowledgement instead of on
librdkafka's 10 ms tick, then long ones, never past the deadline. Pure: a fake flush."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.producer import batch_producer as bp
from kafka_direct.producer.batch_producer import flush_until_acknowledged, next_flush_wait


@pytest.mark.parametrize(
    ("elapsed_s", "remaining_s", "wait_s"),
    [
        (0.0, 30.0, bp.QUICK_SLICE_S),
        (bp.QUICK_FLUSH_S / 2, 30.0, bp.QUICK_SLICE_S),
        (bp.QUICK_FLUSH_S, 30.0, bp.FLUSH_SLICE_S),
        (5.0, 30.0, bp.FLUSH_SLICE_S),
        (5.0, 0.05, 0.05),  # never past the deadline
        (0.0, 0.0004, 0.0004),
        (5.0, 0.0, 0.0),
        (5.0, -1.0, 0.0),  # the deadline passed: one last look, no wait
    ],
)
def test_the_next_wait_is_short_at_first_then_long_and_never_past_the_deadline(
    elapsed_s: float, remaining_s: float, wait_s: float
) -> None:
    assert next_flush_wait(elapsed_s, remaining_s) == pytest.approx(wait_s)


def test_the_quick_slices_are_below_librdkafkas_own_flush_tick() -> None:
    # librdkafka's flush looks at its queue every 10 ms when only failures are reported.
    assert bp.QUICK_SLICE_S < 0.010 < bp.FLUSH_SLICE_S
    assert bp.QUICK_SLICE_S < bp.QUICK_FLUSH_S < bp.FLUSH_SLICE_S


def _flush(slices: list[float], left: Callable[[], int], timeout_s: float) -> list[str]:
    checks: list[str] = []

    def flush_slice(wait_s: float) -> int:
        slices.append(wait_s)
        time.sleep(wait_s)  # as librdkafka's flush does while records are left
        return left()

    flush_until_acknowledged(
        flush_slice,
        lambda: checks.append("check"),
        timeout_s,
        bootstrap="b:9092",
        timeout_option="kafka.delivery.timeout.ms",
        timeout_ms="120000",
        events=ClientEvents("test"),
    )
    return checks


def test_a_flush_acknowledged_at_once_waits_one_quick_slice_and_checks_once() -> None:
    slices: list[float] = []
    assert _flush(slices, lambda: 0, 30.0) == ["check"]
    assert slices == [bp.QUICK_SLICE_S]


def test_a_flush_that_takes_long_checks_after_every_slice_and_moves_to_long_slices() -> None:
    slices: list[float] = []
    until = time.monotonic() + bp.QUICK_FLUSH_S + 3 * bp.FLUSH_SLICE_S
    checks = _flush(slices, lambda: 5 if time.monotonic() < until else 0, 300.0)
    assert len(checks) == len(slices) > 1
    assert slices[0] == bp.QUICK_SLICE_S
    assert slices[-1] == bp.FLUSH_SLICE_S  # the last ones ran after QUICK_FLUSH_S
    assert set(slices) == {bp.QUICK_SLICE_S, bp.FLUSH_SLICE_S}


def test_records_left_at_the_deadline_fail_with_the_timeout_setting_named() -> None:
    slices: list[float] = []
    with pytest.raises(KafkaClientError) as info:
        _flush(slices, lambda: 3, 0.0)
    assert slices == [0.0]
    message = str(info.value)
    assert "3 record(s) were not acknowledged by the broker(s) at b:9092" in message
    assert "kafka.delivery.timeout.ms=120000 ms" in message
    assert info.value.code == "_TIMED_OUT"
