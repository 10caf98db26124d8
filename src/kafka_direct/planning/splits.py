"""Splitting offset ranges into Spark partitions. Pure: plain library, used by the Spark driver.

:func:`split_ranges` is ``KafkaOffsetRangeCalculator.getRanges``: drop empty ranges, split any
range above ``maxRecordsPerPartition`` into ``ceil(size / max)`` nearly equal parts
(SPARK-49259), then, while there are fewer ranges than ``minPartitions``, split the large ones in
proportion to their size, leaving small ones whole (SPARK-30656, SPARK-36576).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kafka_direct.offsets import OffsetRange

__all__ = ["split_ranges"]


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
