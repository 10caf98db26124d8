"""Offset planning: splits, rate limits, data loss. Pure: plain library, used by the Spark driver.

Every rule here follows ``spark-sql-kafka-0-10`` (``connector/kafka-0-10-sql``), unless it says it
deliberately differs:

* :func:`split_ranges` is ``KafkaOffsetRangeCalculator.getRanges``: drop empty ranges, split any
  range above ``maxRecordsPerPartition`` into ``ceil(size / max)`` nearly equal parts
  (SPARK-49259), then, while there are fewer ranges than ``minPartitions``, split the large ones in
  proportion to their size, leaving small ones whole (SPARK-30656, SPARK-36576).
* :func:`rate_limit` is ``KafkaMicroBatchStream.rateLimit`` (``maxOffsetsPerTrigger``, pro-rated by
  backlog) plus a per-partition cap (the DStream's ``maxRatePerPartition``). It differs from Spark
  on purpose: the total is *exactly* ``min(max_total, backlog)``, never more.
* :func:`min_offsets_gate` is ``KafkaMicroBatchStream.delayBatch`` (``minOffsetsPerTrigger`` +
  ``maxTriggerDelay``): run when the delay has passed or enough records are waiting.
* :func:`detect_data_loss` / :func:`apply_data_loss_policy` are the checks of
  ``KafkaOffsetReaderAdmin.getOffsetRangesFromResolvedOffsets`` and ``reportDataLoss``: partitions
  gone, offsets gone backwards, offsets aged out. ``failOnDataLoss=true`` raises, ``false`` warns
  and skips to what is available.
* :func:`resolve_new_partitions`: partitions discovered after the query started begin at earliest.
* :func:`resolve_timestamp_offsets` is ``readTimestampOffsets``: no record at or after the timestamp
  fails, or with strategy ``latest`` starts at the latest offset.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from kafka_direct.errors import ConfigurationError, DataLossError
from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = [
    "DataLoss",
    "apply_data_loss_policy",
    "detect_data_loss",
    "min_offsets_gate",
    "rate_limit",
    "resolve_new_partitions",
    "resolve_timestamp_offsets",
    "split_ranges",
    "total_records",
]

logger = logging.getLogger(__name__)

DataLossKind = Literal["partition_gone", "offset_reset", "offset_out_of_range"]


# --- splitting ------------------------------------------------------------------------------------


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[OffsetRange]:
    """One Spark partition per non-empty range, split as ``KafkaOffsetRangeCalculator`` splits them.

    Returns the ranges sorted by ``(topic, partition, from_offset)``; together they cover the
    non-empty input ranges exactly, without gap or overlap.
    """
    if min_partitions is not None and min_partitions <= 0:
        raise ValueError(f"min_partitions must be > 0, got {min_partitions}")
    if max_records_per_partition is not None and max_records_per_partition <= 0:
        raise ValueError(f"max_records_per_partition must be > 0, got {max_records_per_partition}")
    result = [r for r in ranges if r.count() > 0]
    if max_records_per_partition is not None:
        # SPARK-49259: parts = ceil(size / max). Spark computes it in doubles; integer ceil is the
        # same below 2**53 and exact above.
        result = [
            part for r in result for part in _divide(r, -(-r.count() // max_records_per_partition))
        ]
    if min_partitions is not None and len(result) < min_partitions:
        result = _split_for_min_partitions(result, min_partitions)
    return sorted(result)


def _split_for_min_partitions(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    # SPARK-36576: ranges whose proportional share rounds to one part stay whole, and are taken
    # out of the proportional math, so the large ranges share the remaining partitions.
    total = sum(r.count() for r in ranges)
    unsplit = [_part_count(r.count(), total, min_partitions) == 1 for r in ranges]
    split_total = total - sum(r.count() for r, whole in zip(ranges, unsplit, strict=True) if whole)
    split_min = max(min_partitions - sum(unsplit), 1)
    # Deliberate difference: Spark keys "unsplit" by topic-partition, which is the same thing as by
    # range unless maxRecordsPerPartition already cut one partition into several ranges. We key by
    # range, so each of those pieces is judged on its own size.
    return [
        part
        for r, whole in zip(ranges, unsplit, strict=True)
        for part in _divide(r, 1 if whole else _part_count(r.count(), split_total, split_min))
    ]


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Spark: max(math.round(size.toDouble / totalSize * minParts), 1). Java's Math.round rounds
    # half up, Python's round() rounds half to even, so round by hand.
    share = size / total * min_parts
    rounded = math.floor(share)
    if share - rounded >= 0.5:
        rounded += 1
    return max(rounded, 1)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    # Spark's getDividedPartition: integer division, the later parts absorb the remainder, so the
    # pieces differ by at most one record and always cover [from, until) exactly (SPARK-28489).
    out: list[OffsetRange] = []
    remaining, start = r.count(), r.from_offset
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        if size > 0:
            out.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
    return out


# --- admission control ----------------------------------------------------------------------------


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    max_total: int | None = None,
    max_per_partition: int | None = None,
) -> dict[TopicPartition, int]:
    """Planned end offset for every partition of ``start``: ``start <= end <= latest``.

    ``max_total`` is ``maxOffsetsPerTrigger``, shared in proportion to each partition's backlog as
    ``KafkaMicroBatchStream.rateLimit`` does. ``max_per_partition`` caps each partition on its own
    (Spark's structured source has no such cap; the DStream had ``maxRatePerPartition``); what a
    capped partition cannot take goes to the others (water-filling). Partitions only in ``latest``
    are not planned (the caller resolves their start first, see :func:`resolve_new_partitions`).

    Deliberate differences from Spark, which floors each share and lifts shares below one record
    to one (``if (prorate < 1) ceil else floor``, so small partitions are not starved):

    * Spark's total can exceed ``maxOffsetsPerTrigger`` (three partitions sharing a limit of 1 read
      three records) and can fall short of it by up to one record per partition. Here the total is
      exactly ``min(max_total, sum of capped backlogs)``: shares are computed exactly, shares below
      one are lifted to one when ``max_total`` covers every partition with backlog (as in Spark),
      and the records left by flooring go to the largest remainders, ties in partition order.
      When ``max_total`` is smaller than the number of partitions with backlog, not every partition
      can get a record; the largest shares win.
    * A partition whose latest offset is below its start (offsets went backwards) keeps
      ``end == start``; Spark returns the lower latest offset and leaves it to the data-loss check.
    """
    if max_total is not None and max_total < 0:
        raise ValueError(f"max_total must be >= 0, got {max_total}")
    if max_per_partition is not None and max_per_partition < 0:
        raise ValueError(f"max_per_partition must be >= 0, got {max_per_partition}")
    backlog = {tp: max(0, latest[tp] - off) for tp, off in start.items() if tp in latest}
    caps = {
        tp: lag if max_per_partition is None else min(lag, max_per_partition)
        for tp, lag in backlog.items()
    }
    take = {tp: cap for tp, cap in caps.items() if cap > 0}
    if max_total is not None and sum(take.values()) > max_total:
        take = _apportion(max_total, {tp: backlog[tp] for tp in take}, take)
    return {tp: off + take.get(tp, 0) for tp, off in start.items()}


def _apportion(
    total: int, weights: Mapping[TopicPartition, int], caps: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Integers summing to ``total`` (< sum of caps), in proportion to ``weights``, within caps.

    Each share lies in ``[floor, cap]``, ``floor`` being 1 when ``total`` covers every partition.
    The exact (rational) shares are found by water-filling with both bounds: scale all free shares
    to the budget; if clamping the violators would leave the sum short, the true scale is higher,
    so those above their cap stay there: pin them; otherwise pin those below the floor. Each round
    pins at least one partition. Then floor the shares and hand out the rest by largest remainder.
    """
    floor = 1 if total >= len(weights) else 0
    share: dict[TopicPartition, Fraction] = {}
    free = sorted(weights)
    budget = Fraction(total)
    while free:
        scale = budget / sum(weights[tp] for tp in free)
        over = [tp for tp in free if scale * weights[tp] > caps[tp]]
        under = [tp for tp in free if scale * weights[tp] < floor]
        if not over and not under:
            share.update((tp, scale * weights[tp]) for tp in free)
            break
        excess = sum(scale * weights[tp] - caps[tp] for tp in over)
        deficit = sum(floor - scale * weights[tp] for tp in under)
        pinned = (
            {tp: Fraction(caps[tp]) for tp in over}
            if excess >= deficit
            else {tp: Fraction(floor) for tp in under}
        )
        share.update(pinned)
        budget -= sum(pinned.values())
        free = [tp for tp in free if tp not in pinned]
    whole = {tp: math.floor(s) for tp, s in share.items()}
    leftover = total - sum(whole.values())
    for tp in sorted(share, key=lambda tp: (whole[tp] - share[tp], tp))[:leftover]:
        whole[tp] += 1
    return whole


def min_offsets_gate(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    min_total: int,
    max_trigger_delay_ms: int,
    last_trigger_ms: int,
    now_ms: int,
) -> bool:
    """May this trigger run a batch? ``minOffsetsPerTrigger`` + ``maxTriggerDelay``.

    Spark's ``delayBatch``: run when ``now - last_trigger >= max_trigger_delay`` (checked first),
    or when at least ``min_total`` records wait. The caller keeps ``last_trigger_ms`` and sets it to
    ``now_ms`` whenever this returns True, as Spark does with ``lastTriggerMillis``; starting it at
    0, as Spark does, makes the first batch always run.

    Like Spark, a partition missing from ``start`` counts from offset 0. Unlike Spark, a partition
    whose offsets went backwards counts as 0, not as a negative number that hides other backlog:
    the batch then runs and reports the data loss.
    """
    if now_ms - last_trigger_ms >= max_trigger_delay_ms:
        return True
    waiting = sum(max(0, off - start.get(tp, 0)) for tp, off in latest.items())
    return waiting >= min_total


def total_records(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``start`` and ``end``: an upper bound on records, as offsets have gaps."""
    return sum(max(0, off - start[tp]) for tp, off in end.items() if tp in start)


# --- data loss ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataLoss:
    """Offsets that should exist and do not, found on the driver before planning a batch."""

    topic_partition: TopicPartition
    kind: DataLossKind
    expected_offset: int
    available_offset: int | None
    detail: str

    def lost_records(self) -> int | None:
        """Records known to be lost; None when Kafka cannot tell (a partition gone or recreated)."""
        if self.kind == "offset_out_of_range" and self.available_offset is not None:
            return self.available_offset - self.expected_offset
        return None


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
) -> dict[TopicPartition, int]:
    """``failOnDataLoss``: raise on the first loss, or warn about each and return corrected starts.

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
        logger.warning(
            "Data loss on %s: %s; %s because failOnDataLoss=false. If you want the query to fail "
            'in such cases, set the source option "failOnDataLoss" to "true".',
            tp,
            loss.detail,
            action,
        )
    return corrected


# --- new partitions and timestamps ----------------------------------------------------------------


def resolve_new_partitions(
    known: Mapping[TopicPartition, int],
    current_partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Start offsets for partitions that appeared after the query started: their earliest offset.

    Spark's rule (``getOffsetRangesFromResolvedOffsets``): a new partition is read from the
    beginning, whatever ``startingOffsets`` said, so records written before discovery are not
    skipped. A new partition with no earliest offset vanished again and is left out. Spark calls
    both that and a new partition not starting at 0 data loss; here they are logged as warnings,
    since nothing this query had planned was lost.
    """
    new = sorted(set(current_partitions) - set(known))
    resolved: dict[TopicPartition, int] = {}
    for tp in new:
        if tp not in earliest:
            logger.warning("Cannot find earliest offsets of %s. Some data may have been missed", tp)
            continue
        resolved[tp] = earliest[tp]
        if earliest[tp] != 0:
            logger.warning(
                "Added partition %s starts from %d instead of 0. Some data may have been missed",
                tp,
                earliest[tp],
            )
    if resolved:
        logger.info("Partitions added: %s", {str(tp): off for tp, off in resolved.items()})
    return resolved


def resolve_timestamp_offsets(
    requested: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int | None],
    latest: Mapping[TopicPartition, int],
    *,
    strategy: Literal["error", "latest"],
    option: str,
) -> dict[TopicPartition, int]:
    """Offsets for a by-timestamp option, from the broker's ``offsets_for_times`` answer.

    ``found[tp]`` is the first offset whose timestamp is at or after ``requested[tp]``; None or -1
    means no such record. Spark's ``readTimestampOffsets``: then strategy ``error`` fails and
    ``latest`` uses the latest offset. Spark always uses latest for *ending* offsets, so callers
    resolving ``endingOffsetsByTimestamp`` pass ``strategy="latest"``.
    """
    if strategy not in ("error", "latest"):
        raise ValueError(f"strategy must be 'error' or 'latest', got {strategy!r}")
    resolved: dict[TopicPartition, int] = {}
    for tp in sorted(requested):
        offset = found.get(tp)
        if offset is not None and offset >= 0:
            resolved[tp] = offset
        elif strategy == "error":
            raise ConfigurationError(
                option,
                requested[tp],
                f"a timestamp with a record at or after it in {tp} (no offset matched from "
                f"request of topic-partition {tp} and timestamp {requested[tp]})",
                "To start such partitions at their latest offset instead, set the source option "
                "'startingOffsetsByTimestampStrategy' to 'latest'.",
            )
        elif tp in latest:
            resolved[tp] = latest[tp]
        else:
            raise ValueError(f"no latest offset for {tp} to fall back to for '{option}'")
    return resolved
