"""Data loss: what it is, the ``failOnDataLoss`` policy, and reporting each loss once. Pure:
plain library, used by the Spark driver.

:func:`detect_data_loss` / :func:`apply_data_loss_policy` are the checks of
``KafkaOffsetReaderAdmin.getOffsetRangesFromResolvedOffsets`` and ``reportDataLoss``: partitions
gone, offsets gone backwards, offsets aged out. ``failOnDataLoss=true`` raises, ``false`` warns
and skips to what is available.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kafka_direct.errors import DataLossError
from kafka_direct.offsets import TopicPartition

__all__ = [
    "DataLoss",
    "DataLossKind",
    "LossLedger",
    "apply_data_loss_policy",
    "detect_data_loss",
]

DataLossKind = Literal["partition_gone", "offset_reset", "offset_out_of_range", "added_partition"]


@dataclass(frozen=True)
class DataLoss:
    """Offsets that should exist and do not, found on the driver before planning a batch."""

    topic_partition: TopicPartition
    kind: DataLossKind
    expected_offset: int
    available_offset: int | None
    detail: str

    def lost_records(self) -> int | None:
        """Offsets known to be lost (records at most: offsets have gaps); None when Kafka cannot
        tell (a partition gone or recreated). An added partition that starts at N lost N: a new
        partition starts at 0, so retention or DeleteRecords took them before it was found."""
        lost_below = ("offset_out_of_range", "added_partition")
        if self.kind in lost_below and self.available_offset is not None:
            return self.available_offset - self.expected_offset
        return None


class LossLedger:
    """Data loss reported so far, per partition: each loss is logged and counted once.

    A replayed batch, or a check repeated by the next batch, finds the same loss again; only
    offsets not reported before count. ``lost`` holds the offsets lost per partition (an upper
    bound on records: offsets have gaps); ``listener`` hears of each new loss (the stream
    reader passes it on to :mod:`kafka_direct.source.listener`).
    """

    def __init__(self, listener: Callable[[DataLoss, int], None] | None = None) -> None:
        self.lost: Counter[TopicPartition] = Counter()
        self.listener = listener
        self._upto: dict[TopicPartition, int] = {}
        self._seen: set[tuple[TopicPartition, str, int]] = set()

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "listener": None}

    def record(self, loss: DataLoss) -> bool:
        """Note ``loss``; True if it is new (to be reported)."""
        tp = loss.topic_partition
        lost = loss.lost_records()
        if lost is None:
            key = (tp, loss.kind, loss.expected_offset)
            if key in self._seen:
                return False
            self._seen.add(key)
            count = 0
        else:
            upto = self._upto.get(tp, -1)
            assert loss.available_offset is not None
            if loss.available_offset <= upto:
                return False
            count = loss.available_offset - max(loss.expected_offset, upto)
            self._upto[tp] = loss.available_offset
            self.lost[tp] += count
        if self.listener is not None:
            self.listener(loss, count)
        return True


def detect_data_loss(
    start: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> list[DataLoss]:
    """Data loss for the partitions of ``start``, at most one per partition, in partition order.

    * in ``start``, not in ``latest``: the topic or partition was deleted (``partition_gone``);
    * ``latest < start``: offsets went backwards, the topic was recreated (``offset_reset``);
    * ``earliest > start``: records aged out or were deleted before we read them
      (``offset_out_of_range``). Spark finds this one on the executor, when the fetch fails; here
      it is found while planning, so the batch is planned from what exists.
    """
    losses: list[DataLoss] = []
    for tp in sorted(start):
        off = start[tp]
        if tp not in latest:
            detail = f"{tp} is gone (offset {off} was expected). Some data may have been missed"
            losses.append(DataLoss(tp, "partition_gone", off, None, detail))
        elif latest[tp] < off:
            new = latest[tp]
            detail = (
                f"Partition {tp}'s offset was changed from {off} to {new}, "
                "some data may have been missed"
            )
            losses.append(DataLoss(tp, "offset_reset", off, new, detail))
        elif tp in earliest and earliest[tp] > off:
            first = earliest[tp]
            detail = (
                f"offset {off} was expected but the earliest available is {first} "
                f"({first - off} records are no longer in Kafka)"
            )
            losses.append(DataLoss(tp, "offset_out_of_range", off, first, detail))
    return losses


def apply_data_loss_policy(
    losses: Sequence[DataLoss],
    start: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    *,
    fail_on_data_loss: bool,
    logger: logging.Logger,
    ledger: LossLedger | None = None,
) -> dict[TopicPartition, int]:
    """``failOnDataLoss``: raise on the first loss, or warn about each and return corrected starts.

    With a ``ledger``, a loss it has seen before is corrected again but not reported again.

    Corrections with ``fail_on_data_loss=False``: ``offset_out_of_range`` resumes at the earliest
    offset; ``partition_gone`` drops the partition; ``offset_reset`` resumes at the earliest offset
    of the recreated topic (usually 0). That last one deliberately differs from Spark, which drops
    the inverted range and so resumes from the new *latest* offset, skipping whatever the recreated
    topic already holds.
    """
    if fail_on_data_loss and losses:
        first = losses[0]
        detail = first.detail
        if len(losses) > 1:
            detail += f" (and data loss on {len(losses) - 1} more partition(s))"
        raise DataLossError(first.topic_partition.topic, first.topic_partition.partition, detail)
    corrected = dict(start)
    for loss in losses:
        tp = loss.topic_partition
        if loss.kind == "partition_gone":
            corrected.pop(tp, None)
            action = "dropping the partition from the query"
        else:
            # A recreated topic starts again at 0; an aged-out one at the earliest it still holds.
            fallback = 0 if loss.kind == "offset_reset" else (loss.available_offset or 0)
            corrected[tp] = earliest.get(tp, fallback)
            lost = loss.lost_records()
            skipped = f"skipping {lost} records and " if lost is not None else ""
            action = f"{skipped}continuing from offset {corrected[tp]}"
        if ledger is not None and not ledger.record(loss):
            continue
        logger.warning(
            "Data loss on %s: %s; %s because failOnDataLoss=false. If you want the query to fail "
            'in such cases, set the source option "failOnDataLoss" to "true".',
            tp,
            loss.detail,
            action,
        )
    return corrected
