"""Rate control for the direct stream: the PID backpressure estimator and the per-partition
clamp. Pure: plain library (no Spark, no Kafka client), used by the Spark driver's stream loop.

* :class:`PIDRateEstimator` is Spark Streaming's ``PIDRateEstimator.compute``, formula for
  formula, with DStream's defaults (proportional 1.0, integral 0.2, derivative 0.0, minimum rate
  100 records/s). It turns each finished batch (end time, records, processing time, scheduling
  delay) into the rate the next batches may read at.
* :func:`max_messages_per_partition` is ``DirectKafkaInputDStream.maxMessagesPerPartition``: the
  backpressure rate (or, before the first estimate, ``initialRate``) is spread over partitions in
  proportion to their lag and capped by ``maxRatePerPartition``; without backpressure each
  partition gets its own ``maxRatePerPartition``. Records per batch are ``rate × batchInterval``
  truncated, but at least ``minRatePerPartition`` (1), so no partition with lag starves.
* :func:`clamp` is ``DirectKafkaInputDStream.clamp``: ``until = min(latest, current + messages)``.

One deliberate difference from Spark, documented on :func:`max_messages_per_partition`: a
partition without a maximum rate is not limited to one record per batch just because another
partition has one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafka_direct.offsets import TopicPartition

__all__ = [
    "PIDRateEstimator",
    "RateFunction",
    "clamp",
    "max_messages_per_partition",
]

log = logging.getLogger(__name__)

#: Records per second allowed for one partition; 0 or less means "no limit".
RateFunction = Callable[[TopicPartition], float]


@dataclass
class PIDRateEstimator:
    """Spark Streaming's PID rate estimator (``spark.streaming.backpressure.pid.*``).

    The error is the difference between the rate the previous estimate asked for and the rate the
    last batch was actually processed at (records / processing time). The integral term comes
    from the scheduling delay: a delay of ``s`` ms means about ``s × processingRate`` records are
    waiting, which at one batch per interval is a rate of ``s × processingRate / interval``.
    """

    batch_interval_ms: int
    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0

    def __post_init__(self) -> None:
        # Spark's require(...) checks, with its wording.
        checks = [
            (self.batch_interval_ms > 0, f"batch interval {self.batch_interval_ms} ms", "> 0"),
            (self.proportional >= 0, f"proportional term {self.proportional}", ">= 0"),
            (self.integral >= 0, f"integral term {self.integral}", ">= 0"),
            (self.derivative >= 0, f"derivative term {self.derivative}", ">= 0"),
            (self.min_rate > 0, f"minimum rate {self.min_rate}", "> 0"),
        ]
        for ok, what, expected in checks:
            if not ok:
                raise ValueError(f"PIDRateEstimator: the {what} is invalid; it must be {expected}")
        self._first_run = True
        self._latest_time = -1
        self._latest_rate = -1.0
        self._latest_error = -1.0

    def compute(
        self, time_ms: int, num_elements: int, processing_delay_ms: int, scheduling_delay_ms: int
    ) -> float | None:
        """The new rate in records/s, or None when this batch gives no estimate.

        None for the first batch that has records (it only seeds the controller), for a batch
        without records or without processing time, and for a time not after the previous one.
        """
        if not (time_ms > self._latest_time and num_elements > 0 and processing_delay_ms > 0):
            return None
        delay_since_update = (time_ms - self._latest_time) / 1000  # seconds
        processing_rate = num_elements / processing_delay_ms * 1000  # records/s
        error = self._latest_rate - processing_rate
        historical_error = scheduling_delay_ms * processing_rate / self.batch_interval_ms
        d_error = (error - self._latest_error) / delay_since_update
        new_rate = max(
            self._latest_rate
            - self.proportional * error
            - self.integral * historical_error
            - self.derivative * d_error,
            self.min_rate,
        )
        self._latest_time = time_ms
        if self._first_run:
            self._latest_rate = processing_rate
            self._latest_error = 0.0
            self._first_run = False
            return None
        self._latest_rate = new_rate
        self._latest_error = error
        log.debug(
            "PID: processing rate %.1f/s, error %.1f, historical error %.1f → rate %.1f/s",
            processing_rate,
            error,
            historical_error,
            new_rate,
        )
        return new_rate


def max_messages_per_partition(
    current: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    batch_interval_s: float,
    max_rate: RateFunction,
    min_messages: Callable[[TopicPartition], int] = lambda _tp: 1,
    backpressure_rate: float | None = None,
) -> dict[TopicPartition, int] | None:
    """Records each partition of ``latest`` may read this batch; None means "no limit at all".

    ``backpressure_rate`` is the estimator's latest rate, or ``initialRate`` before it has one
    (records/s for the whole stream; None or <= 0 when backpressure is off or has no rate yet).
    With it, partition ``tp`` gets ``lag(tp) / totalLag × rate``, capped by ``max_rate(tp)`` when
    that is > 0. Without it, ``max_rate(tp)``. The result is ``trunc(batch_interval_s × rate)``,
    at least ``min_messages(tp)``; :func:`clamp` then keeps it within the log.

    Deliberate difference from Spark: when some partitions have a maximum rate and others have
    none (rate <= 0) and there is no backpressure rate, Spark gives the unlimited ones
    ``minRatePerPartition`` (one record per batch). Here they are unlimited, which is what "no
    maximum" says. (With a backpressure rate Spark leaves them uncapped too, as here.)
    """
    unlimited = {tp for tp in latest if not max_rate(tp) > 0}
    if backpressure_rate is not None and backpressure_rate > 0:
        lag = {tp: max(latest[tp] - current.get(tp, latest[tp]), 0) for tp in latest}
        total_lag = sum(lag.values())
        if total_lag == 0:
            # Spark's 0/0 is NaN, which fails its "sum > 0" test: no limit (nothing to read).
            return None
        effective: dict[TopicPartition, float] = {}
        for tp, partition_lag in lag.items():
            share = partition_lag / float(total_lag) * backpressure_rate
            cap = max_rate(tp)
            effective[tp] = min(share, cap) if cap > 0 else share
        unlimited = set()
    else:
        effective = {tp: max(max_rate(tp), 0.0) for tp in latest}
    if not sum(effective.values()) > 0:
        return None
    messages: dict[TopicPartition, int] = {}
    for tp, rate in effective.items():
        if tp in unlimited:
            messages[tp] = max(latest[tp] - current.get(tp, latest[tp]), 0)
        else:
            messages[tp] = max(math.trunc(batch_interval_s * rate), min_messages(tp))
    return messages


def clamp(
    current: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    messages: Mapping[TopicPartition, int] | None,
) -> dict[TopicPartition, int]:
    """Until offsets: ``min(latest, current + messages)`` per partition, ``latest`` if no limit.

    A partition whose latest offset is below its current one (offsets went backwards) keeps
    ``until == current``; the caller reports that as data loss.
    """
    until: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        start = current.get(tp, end)
        if messages is not None and tp in messages:
            end = min(end, start + messages[tp])
        until[tp] = max(end, start)
    return until
