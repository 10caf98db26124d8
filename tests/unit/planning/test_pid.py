"""The PID rate estimator and the per-partition clamp (kafka_direct.rate_estimator).

The PID cases are Spark's PIDRateEstimatorSuite, plus tables computed by hand from Spark's
formula; the clamp cases follow DirectKafkaInputDStream.maxMessagesPerPartition.
"""

from __future__ import annotations

import random

import pytest

from kafka_direct.offsets import TopicPartition
from kafka_direct.planning.pid import PIDRateEstimator
from kafka_direct.planning.rates import clamp, max_messages_per_partition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)


def default_estimator() -> PIDRateEstimator:
    # PIDRateEstimatorSuite.createDefaultEstimator
    return PIDRateEstimator(20, 1.0, 0.0, 0.0, 10)


# --- Spark's PIDRateEstimatorSuite ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param((0, 1, 2, 3, 10), id="batch interval 0"),
        pytest.param((100, -1, 2, 3, 10), id="negative proportional"),
        pytest.param((100, 0, -1, 3, 10), id="negative integral"),
        pytest.param((100, 0, 0, -1, 10), id="negative derivative"),
        pytest.param((100, 0, 0, 0, 0), id="zero min rate"),
        pytest.param((100, 0, 0, 0, -10), id="negative min rate"),
    ],
)
def test_estimator_checks_ranges(args: tuple[int, float, float, float, float]) -> None:
    with pytest.raises(ValueError, match="PIDRateEstimator"):
        PIDRateEstimator(*args)


def test_defaults_are_dstreams() -> None:
    p = PIDRateEstimator(2000)
    assert (p.proportional, p.integral, p.derivative, p.min_rate) == (1.0, 0.2, 0.0, 100.0)


def test_first_estimate_is_none() -> None:
    assert default_estimator().compute(0, 10, 10, 0) is None


def test_second_estimate_is_not_none() -> None:
    p = default_estimator()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 10, 0) == 1000  # 10 records in 10 ms


def test_no_estimate_when_no_time_difference_between_successive_calls() -> None:
    p = default_estimator()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 10, 0) is not None
    assert p.compute(10, 10, 10, 0) is None


def test_no_estimate_when_no_records_in_previous_batch() -> None:
    p = default_estimator()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 0, 10, 0) is None
    assert p.compute(20, -10, 10, 0) is None


def test_no_estimate_when_there_is_no_processing_delay() -> None:
    p = default_estimator()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 0, 0) is None
    assert p.compute(20, 10, -10, 0) is None


def test_estimate_is_never_less_than_min_rate() -> None:
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, 5.0)
    res = [p.compute(i * 20, 1, 20, 100) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [5.0] * 49


def test_with_no_accumulated_or_positive_error_follow_the_processing_speed() -> None:
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, 10)
    res = [p.compute(i * 20, (i + 1) * 20, 20, 0) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [(x + 1) * 1000.0 for x in range(1, 50)]


def test_with_no_accumulated_but_some_positive_error_follow_the_processing_speed() -> None:
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, 10)
    res = [p.compute(i * 20, (50 - i) * 20, 20, 0) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [(50 - x) * 1000.0 for x in range(1, 50)]


def test_with_some_accumulated_and_some_positive_error_stay_below_the_processing_speed() -> None:
    p = PIDRateEstimator(20, 1.0, 0.01, 0.0, 10)
    rng = random.Random(7)
    elements = [rng.randrange(1000) for _ in range(50)]
    sched = [rng.randrange(19) for _ in range(50)]
    speeds = [e / 20 * 1000 for e in elements]
    res = [p.compute(i * 20, elements[i], 20, sched[i]) for i in range(50)]
    assert res[0] is None
    for n in range(1, 50):
        if elements[n] == 0:
            assert res[n] is None  # Spark's "no records" rule
            continue
        rate = res[n]
        assert rate is not None
        if rate > 0 and sched[n] > 0:
            assert rate < speeds[n]


# --- hand-computed tables -------------------------------------------------------------------------


def test_dstream_defaults_table() -> None:
    # batch interval 2000 ms, proportional 1.0, integral 0.2, derivative 0, min rate 100.
    p = PIDRateEstimator(2000)
    # Seeds the controller: latestRate = 1000 records / 1 s = 1000/s.
    assert p.compute(2000, 1000, 1000, 0) is None
    # processingRate = 1000 / 2 s = 500; error = 1000 - 500 = 500;
    # historical = 500 ms × 500 / 2000 ms = 125; rate = 1000 - 500 - 0.2 × 125 = 475.
    assert p.compute(4000, 1000, 2000, 500) == pytest.approx(475.0)
    # processingRate = 950 / 1.9 s = 500; error = 475 - 500 = -25; rate = 475 + 25 = 500.
    assert p.compute(6000, 950, 1900, 0) == pytest.approx(500.0)
    # processingRate = 50 / 1 s = 50; error = 450; historical = 3000 × 50 / 2000 = 75;
    # rate = 500 - 450 - 15 = 35 → min rate 100.
    assert p.compute(8000, 50, 1000, 3000) == pytest.approx(100.0)


def test_derivative_term_table() -> None:
    p = PIDRateEstimator(1000, 1.0, 0.0, 0.5, 1.0)
    assert p.compute(1000, 100, 100, 0) is None  # latestRate 1000, latestError 0
    # processingRate 800; error 200; dError = (200 - 0) / 1 s = 200;
    # rate = 1000 - 200 - 0.5 × 200 = 700.
    assert p.compute(2000, 80, 100, 0) == pytest.approx(700.0)
    # processingRate 600; error 100; dError = (100 - 200) / 2 s = -50;
    # rate = 700 - 100 + 25 = 625.
    assert p.compute(4000, 60, 100, 0) == pytest.approx(625.0)


def test_batches_without_records_do_not_move_the_time_base() -> None:
    p = PIDRateEstimator(1000, 1.0, 0.0, 1.0, 1.0)
    p.compute(1000, 100, 100, 0)
    assert p.compute(2000, 0, 100, 0) is None
    # delaySinceUpdate is from the last *estimated* batch (1000 → 3000 ms = 2 s):
    # processingRate 500; error 500; dError = 500 / 2 = 250; rate = 1000 - 500 - 250 = 250.
    assert p.compute(3000, 50, 100, 0) == pytest.approx(250.0)


def test_closed_loop_converges_to_what_the_function_can_handle() -> None:
    # A DStream-like loop, simulated: batches due every second, a function that handles 200
    # records/s, a big backlog, an initial rate far too high. The rate must come down to about
    # the capacity and the scheduling delay must not grow without bound.
    interval_ms, capacity = 1000, 200.0
    p = PIDRateEstimator(interval_ms, min_rate=10)
    rate, now, delays, rates = 2000.0, 0.0, [], []
    for k in range(60):
        due = k * interval_ms
        start = max(now, due)
        records = int(rate * interval_ms / 1000)
        processing = records / capacity * 1000
        now = start + processing
        delays.append(start - due)
        estimate = p.compute(round(now), records, round(processing), round(start - due))
        if estimate is not None:
            rate = float(int(estimate))
        rates.append(rate)
    # Spark's dynamics: the integral term first drops the rate to the minimum while the delay is
    # worked off, then the rate climbs back to the capacity.
    assert min(rates) == 10
    assert all(180 <= r <= 200 for r in rates[-10:])
    assert max(delays) > 10 * interval_ms
    assert delays[-10:] == [0] * 10


# --- maxMessagesPerPartition and clamp ------------------------------------------------------------


def no_rate(_tp: TopicPartition) -> float:
    return 0.0


def test_no_limits_means_no_clamp() -> None:
    current, latest = {A0: 0, A1: 5}, {A0: 100, A1: 50}
    assert max_messages_per_partition(current, latest, batch_interval_s=2, max_rate=no_rate) is None
    assert clamp(current, latest, None) == latest


def test_max_rate_times_batch_interval() -> None:
    current, latest = {A0: 0, A1: 5}, {A0: 100, A1: 10}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=2, max_rate=lambda _tp: 10
    )
    assert messages == {A0: 20, A1: 20}
    assert clamp(current, latest, messages) == {A0: 20, A1: 10}


def test_fractional_products_are_truncated_but_at_least_the_minimum() -> None:
    current, latest = {A0: 0}, {A0: 100}
    assert max_messages_per_partition(
        current, latest, batch_interval_s=0.5, max_rate=lambda _tp: 3
    ) == {A0: 1}
    assert max_messages_per_partition(
        current, latest, batch_interval_s=0.1, max_rate=lambda _tp: 3
    ) == {A0: 1}  # trunc(0.3) = 0 → minRatePerPartition 1
    assert max_messages_per_partition(
        current, latest, batch_interval_s=0.1, max_rate=lambda _tp: 3, min_messages=lambda _t: 5
    ) == {A0: 5}


def test_per_partition_rates() -> None:
    current, latest = {A0: 0, A1: 0, B0: 0}, {A0: 100, A1: 100, B0: 100}
    rates = {A0: 5.0, A1: 10.0, B0: 25.0}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=2, max_rate=lambda tp: rates[tp]
    )
    assert messages == {A0: 10, A1: 20, B0: 50}


def test_partitions_without_a_max_rate_are_not_limited() -> None:
    # Deliberately not Spark, which gives them minRatePerPartition (1 record per batch).
    current, latest = {A0: 0, B0: 0}, {A0: 100, B0: 100}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=2, max_rate=lambda tp: 5.0 if tp == A0 else 0.0
    )
    assert messages == {A0: 10, B0: 100}
    assert clamp(current, latest, messages) == {A0: 10, B0: 100}


def test_backpressure_rate_is_spread_by_lag() -> None:
    current, latest = {A0: 0, A1: 0}, {A0: 300, A1: 100}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=2, max_rate=no_rate, backpressure_rate=100
    )
    assert messages == {A0: 150, A1: 50}  # 75/s and 25/s for 2 s


def test_backpressure_shares_are_capped_by_max_rate() -> None:
    current, latest = {A0: 0, A1: 0}, {A0: 300, A1: 100}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=2, max_rate=lambda _tp: 50, backpressure_rate=100
    )
    assert messages == {A0: 100, A1: 50}  # min(75, 50) and min(25, 50)


def test_backpressure_gives_at_least_one_record_to_a_partition_with_lag() -> None:
    current, latest = {A0: 0, A1: 0}, {A0: 10_000, A1: 1}
    messages = max_messages_per_partition(
        current, latest, batch_interval_s=1, max_rate=no_rate, backpressure_rate=10
    )
    assert messages == {A0: 9, A1: 1}
    assert clamp(current, latest, messages) == {A0: 9, A1: 1}


def test_backpressure_without_lag_means_no_limit() -> None:
    current = latest = {A0: 5, A1: 7}
    assert (
        max_messages_per_partition(
            current, latest, batch_interval_s=1, max_rate=lambda _tp: 3, backpressure_rate=100
        )
        is None
    )


def test_no_backpressure_rate_falls_back_to_max_rate() -> None:
    current, latest = {A0: 0}, {A0: 100}
    for rate in (None, 0.0, -1.0):
        assert max_messages_per_partition(
            current, latest, batch_interval_s=1, max_rate=lambda _tp: 7, backpressure_rate=rate
        ) == {A0: 7}


def test_clamp_keeps_offsets_that_went_backwards_empty() -> None:
    assert clamp({A0: 50}, {A0: 10}, {A0: 5}) == {A0: 50}
    assert clamp({A0: 50}, {A0: 10}, None) == {A0: 50}
