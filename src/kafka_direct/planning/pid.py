"""Spark Streaming's PID rate estimator (backpressure). Pure: plain library, used by the Spark
driver (the DStream-style stream's loop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["PIDRateEstimator"]

log = logging.getLogger(__name__)


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
