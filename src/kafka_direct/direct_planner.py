"""Batch planning for the DStream-style direct stream (:mod:`kafka_direct.direct_stream`). Runs in
the Spark driver (the user's process, in the stream's loop thread); pure apart from the injected
offset reader, stored-offset lookup and rate estimator.

This is the first half of the seeds' ``DirectKafkaInputDStream.compute``, everything before the
``KafkaRDD`` is built:

- :meth:`DirectStreamPlanner.initial_offsets`: where the stream starts, given offsets over stored
  ones over ``auto.offset.reset`` (:func:`~kafka_direct.strategies.resolve_start_offsets`);
- :meth:`DirectStreamPlanner.plan`: the strategy's partitions (new topics for a pattern, new
  partitions), their latest and earliest offsets, one request each for all partitions; new
  partitions start as :func:`~kafka_direct.strategies.resolve_new_partition_offsets` says, data
  loss follows ``failOnDataLoss``; then the rate limits and the backpressure rate ``clamp`` each
  partition's ``untilOffset``;
- :class:`RateController`: the backpressure rate each batch is planned with, fed by the
  :mod:`~kafka_direct.rate_estimator` after each batch (Spark's ``DirectKafkaRateController``).

The structured source plans its micro-batches in :mod:`kafka_direct.planner` instead: Spark's
checkpoint owns its offsets, and its limits are ``ReadLimit``s rather than a batch interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning import apply_data_loss_policy, detect_data_loss
from kafka_direct.positions import OffsetReader
from kafka_direct.rate_estimator import (
    PIDRateEstimator,
    RateFunction,
    clamp,
    max_messages_per_partition,
)
from kafka_direct.strategies import (
    ConsumerStrategy,
    resolve_new_partition_offsets,
    resolve_start_offsets,
)

__all__ = ["DirectStreamPlanner", "RateController"]

log = logging.getLogger(__name__)


class DirectStreamPlanner:
    """Plans each batch's offset ranges (``latestOffsets`` + ``clamp``). Driver, pure apart from
    the injected offset reader and stored-offset lookup."""

    def __init__(
        self,
        strategy: ConsumerStrategy,
        reader: OffsetReader,
        load_stored: Callable[[list[TopicPartition]], PartitionOffsets],
        *,
        batch_interval_s: float,
        max_rate: RateFunction,
        min_rate: Callable[[TopicPartition], int],
        fail_on_data_loss: bool,
    ) -> None:
        self.strategy = strategy
        self.reader = reader
        self._load_stored = load_stored
        self._interval_s = batch_interval_s
        self._max_rate = max_rate
        self._min_rate = min_rate
        self._fail_on_data_loss = fail_on_data_loss

    def initial_offsets(self) -> PartitionOffsets:
        """Where the stream starts: given > stored > ``auto.offset.reset``."""
        tps = sorted(self.reader.partitions(self.strategy.subscription))
        stored = self._load_stored(tps) if tps else {}
        return resolve_start_offsets(
            self.strategy, tps, stored, self.reader, fail_on_data_loss=self._fail_on_data_loss
        )

    def plan(
        self, current: Mapping[TopicPartition, int], backpressure_rate: float | None = None
    ) -> list[OffsetRange]:
        """The next batch's ranges, one per partition (empty ones included), from ``current``."""
        tps = self.reader.partitions(self.strategy.subscription)
        latest = self.reader.latest(tps, known=current)
        earliest = self.reader.earliest(tps)
        start = dict(current)
        losses = detect_data_loss(start, earliest, latest)
        if losses:
            start = apply_data_loss_policy(
                losses, start, earliest, fail_on_data_loss=self._fail_on_data_loss, logger=log
            )
        new = sorted(set(latest) - set(start))
        if new:
            start.update(
                resolve_new_partition_offsets(
                    self.strategy,
                    new,
                    self._load_stored(new),
                    earliest,
                    latest,
                    fail_on_data_loss=self._fail_on_data_loss,
                )
            )
        ends = {tp: latest[tp] for tp in start}
        messages = max_messages_per_partition(
            start,
            ends,
            batch_interval_s=self._interval_s,
            max_rate=self._max_rate,
            min_messages=self._min_rate,
            backpressure_rate=backpressure_rate,
        )
        until = clamp(start, ends, messages)
        return [OffsetRange(tp.topic, tp.partition, start[tp], until[tp]) for tp in sorted(start)]


class RateController:
    """The backpressure rate for :meth:`DirectStreamPlanner.plan`; None without backpressure.

    Only the loop thread touches it (one batch at a time), so it needs no lock.
    """

    def __init__(self, estimator: PIDRateEstimator | None, initial_rate: float) -> None:
        self._estimator = estimator
        self._initial_rate = initial_rate
        self._latest_rate = -1  # Spark keeps the estimate as a Long, -1 until the first one

    def current(self) -> float | None:
        if self._estimator is None:
            return None
        # DirectKafkaInputDStream: the latest estimate if there is one, else initialRate.
        rate = self._latest_rate if self._latest_rate > 0 else self._initial_rate
        return float(rate) if rate > 0 else None

    def update(
        self, ended_s: float, num_records: int, processing_delay_ms: int, scheduling_delay_ms: int
    ) -> None:
        """Feed a finished batch to the estimator (Spark's ``RateController.onBatchCompleted``)."""
        if self._estimator is None:
            return
        new_rate = self._estimator.compute(
            round(ended_s * 1000), num_records, processing_delay_ms, scheduling_delay_ms
        )
        if new_rate is not None:
            self._latest_rate = int(new_rate)
            log.debug("Backpressure: rate %d records/s", self._latest_rate)
