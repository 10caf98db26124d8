"""Batch planning for the DStream-style direct stream (:mod:`kafka_direct.dstream.stream`). Runs in
the Spark driver (the user's process, in the stream's loop thread); pure apart from the injected
offset reader, stored-offset lookup and rate estimator.

This is the first half of Spark's ``DirectKafkaInputDStream.compute``, everything before the
``KafkaRDD`` is built:

- :meth:`DirectStreamPlanner.initial_offsets`: where the stream starts, as Scala's
  ``ConsumerStrategy.onStart`` does: the offset given to the strategy, else the offset stored for
  the group, else ``auto.offset.reset`` (``none``: an error naming the partitions). Given and
  stored offsets go through the same checks as the structured source's
  (:func:`~kafka_direct.planning.resolve.resolve_known`);
- :meth:`DirectStreamPlanner.plan`: the strategy's partitions (new topics for a pattern, new
  partitions), their latest and earliest offsets, one request each for all partitions; new
  partitions start at a given or stored offset, else at earliest (Spark's DStream uses its
  consumer's position there: the committed offset, else ``auto.offset.reset``; earliest loses
  nothing), with Spark's data-loss checks
  (:func:`~kafka_direct.planning.resolve.resolve_new_partitions`); then the rate limits and the
  backpressure rate ``clamp`` each partition's ``untilOffset``;
- :class:`RateController`: the backpressure rate each batch is planned with, fed by the
  :mod:`~kafka_direct.planning.pid` estimator after each batch (Spark's
  ``DirectKafkaRateController``).

Faults, as in the structured source (:mod:`kafka_direct.planning.patience`): a partition whose
offsets the cluster does not answer keeps its position in this batch; a batch with no answer at
all reads nothing; a new partition whose stored offset cannot be read stays out of the batch,
still new; only after ``unavailable_timeout_ms`` without an answer does the stream fail. Errors
name ``createDirectStream``'s arguments: ``failOnDataLoss=False`` in a ``DataLossError``, the
strategy's ``offsets`` or the group's stored offsets for an offset past the log end.

The structured source plans its micro-batches in :mod:`kafka_direct.planning.micro_batch`
instead: Spark's checkpoint owns its offsets, and its limits are ``ReadLimit``s rather than a
batch interval. Both resolve offsets with :mod:`kafka_direct.planning.resolve`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kafka_direct.config.dstream import RateFunction
from kafka_direct.dstream.strategies import ConsumerStrategy
from kafka_direct.errors import (
    ConfigurationError,
    DataLossError,
    KafkaClientError,
    OffsetsUnavailableError,
)
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.planning.data_loss import LossLedger, apply_data_loss_policy, detect_data_loss
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.planning.pid import PIDRateEstimator
from kafka_direct.planning.rates import clamp, max_messages_per_partition
from kafka_direct.planning.reader import DSTREAM, OffsetReader
from kafka_direct.planning.resolve import Fallback, resolve_known, resolve_new_partitions
from kafka_direct.stores.base import OffsetStoreError

__all__ = ["DirectStreamPlanner", "RateController"]

log = logging.getLogger(__name__)

#: ``auto.offset.reset`` as the fallback of the shared resolver.
_FALLBACK: dict[str, Fallback] = {"earliest": "earliest", "latest": "latest", "none": "error"}


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
        patience: OffsetPatience | None = None,
    ) -> None:
        self.strategy = strategy
        self.reader = reader
        self._load_stored = load_stored
        self._interval_s = batch_interval_s
        self._max_rate = max_rate
        self._min_rate = min_rate
        self.fail_on_data_loss = fail_on_data_loss
        self._patience = patience or OffsetPatience(600_000, what=f"Stream {strategy.group_id}")
        self.losses = LossLedger()

    def initial_offsets(self) -> PartitionOffsets:
        """Where the stream starts: given > stored > ``auto.offset.reset``."""
        try:
            return self._patience.wait_for("resolve the starting offsets", self._resolve_start)
        except DataLossError as exc:
            raise exc.raised_by("createDirectStream") from None

    def _resolve_start(self) -> PartitionOffsets:
        strategy, group = self.strategy, self.strategy.group_id
        tps = sorted(
            self._patience.partitions(
                lambda: self.reader.partitions(strategy.subscription, rules=DSTREAM)
            )
        )
        # Loaded for every partition, given ones too: the store learns where the stream starts
        # (a Kafka group store checks each commit against it).
        stored = self._load_stored(tps) if tps else {}
        given = {tp: off for tp, off in strategy.offsets.items() if tp in set(tps)}
        rest = [tp for tp in tps if tp not in given]
        missing = [tp for tp in rest if tp not in stored]
        if missing and strategy.auto_offset_reset == "none":
            raise ConfigurationError(
                "auto.offset.reset",
                "none",
                "an offset for every partition the stream reads; none for "
                + ", ".join(map(str, missing)),
                f"Commit offsets for group '{group}', pass offsets to the strategy, or set "
                "'auto.offset.reset' to 'earliest' or 'latest'.",
            )
        start: PartitionOffsets = {}
        # Each source of offsets is its own "option" in the error for an offset past the log
        # end: the strategy's offsets argument, or what the group's store holds.
        if given:
            start.update(
                resolve_known(
                    given,
                    sorted(given),
                    self.reader,
                    fallback="error",
                    option="offsets",
                    fail_on_data_loss=self.fail_on_data_loss,
                    beyond_fix=lambda tp: (
                        f"ConsumerStrategies.{strategy.name} was given an offset that does not "
                        f"exist yet: check the topic was not recreated, or give {tp} an offset "
                        "within its log."
                    ),
                )
            )
        if rest:
            start.update(
                resolve_known(
                    {tp: off for tp, off in stored.items() if tp in set(rest)},
                    rest,
                    self.reader,
                    fallback=_FALLBACK[strategy.auto_offset_reset],
                    option=f"offsets stored for group '{group}'",
                    fail_on_data_loss=self.fail_on_data_loss,
                    beyond_fix=lambda tp: (
                        "The stored offset does not exist yet: check the topic was not "
                        f"recreated, or reset the group's offsets for {tp} (kafka-direct "
                        "offsets reset)."
                    ),
                )
            )
        log.info(
            "%s starts at %s",
            strategy.describe(),
            {str(tp): off for tp, off in sorted(start.items())},
        )
        return start

    def plan(
        self, current: Mapping[TopicPartition, int], backpressure_rate: float | None = None
    ) -> list[OffsetRange]:
        """The next batch's ranges, one per partition (empty ones included), from ``current``."""
        try:
            return self._plan(current, backpressure_rate)
        except DataLossError as exc:
            raise exc.raised_by("createDirectStream") from None

    def _plan(
        self, current: Mapping[TopicPartition, int], backpressure_rate: float | None
    ) -> list[OffsetRange]:
        try:
            tps = self._patience.partitions(
                lambda: self.reader.partitions(self.strategy.subscription, rules=DSTREAM)
            )
            latest, missing = _answered(lambda: self.reader.latest(tps, known=current))
            earliest, missing_first = _answered(lambda: self.reader.earliest(tps))
        except KafkaClientError as exc:
            self._patience.outage(exc)  # raises once the outage lasts too long
            return [
                OffsetRange(tp.topic, tp.partition, off, off) for tp, off in sorted(current.items())
            ]
        if missing:
            self._patience.partial(missing)
        start = dict(current)
        # A partition without an answer is not gone: it keeps its position in this batch.
        held = {tp: off for tp, off in start.items() if tp in missing}
        checked = {tp: off for tp, off in start.items() if tp not in missing}
        losses = detect_data_loss(
            checked, {tp: o for tp, o in earliest.items() if tp not in missing_first}, latest
        )
        if losses:
            checked = apply_data_loss_policy(
                losses,
                checked,
                earliest,
                fail_on_data_loss=self.fail_on_data_loss,
                logger=log,
                ledger=self.losses,
            )
        start = {**checked, **held}
        new = sorted(tp for tp in set(latest) - set(start) if tp in earliest)
        given, unstored = self._new_partition_offsets(new)
        # Answered, except new partitions whose stored offsets could not be read: their
        # waiting goes on (answered() would restart it every batch).
        self._patience.answered(tp for tp in latest if tp not in unstored)
        if unstored:
            self._patience.partial(unstored)  # raises once they have waited too long
        latest.update(held)
        new = [tp for tp in new if tp not in unstored]
        if new:
            start.update(
                resolve_new_partitions(
                    new,
                    earliest,
                    given=given,
                    latest=latest,
                    fail_on_data_loss=self.fail_on_data_loss,
                    ledger=self.losses,
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

    def _new_partition_offsets(
        self, new: list[TopicPartition]
    ) -> tuple[PartitionOffsets, dict[TopicPartition, str]]:
        """The offsets given or stored for partitions that appeared, and the partitions whose
        stored offset could not be read (an outage of the store, or of the group's
        coordinator): those stay new, out of this batch, as partitions without an answer."""
        given = {tp: self.strategy.offsets[tp] for tp in new if tp in self.strategy.offsets}
        ask = [tp for tp in new if tp not in given]
        if not ask:
            return given, {}
        try:
            stored = self._load_stored(ask)
        except (KafkaClientError, OffsetStoreError) as exc:
            if isinstance(exc, KafkaClientError) and not exc.retriable:
                raise
            why = f"its stored offset could not be read: {exc}"
            return given, dict.fromkeys(ask, why)
        return {**{tp: off for tp, off in stored.items() if tp in set(ask)}, **given}, {}


def _answered(
    lookup: Callable[[], PartitionOffsets],
) -> tuple[PartitionOffsets, dict[TopicPartition, str]]:
    """The offsets the cluster gave, and the partitions it gave none for (with the reason)."""
    try:
        return dict(lookup()), {}
    except OffsetsUnavailableError as exc:
        return dict(exc.offsets), dict(exc.unavailable)


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
