"""Admission control: how many offsets a batch may take. Pure: plain library, used by the Spark
driver.

- :func:`rate_limit` is ``KafkaMicroBatchStream.rateLimit`` (``maxOffsetsPerTrigger``, pro-rated
  by backlog) plus a per-partition cap; :func:`min_offsets_gate` is ``delayBatch``
  (``minOffsetsPerTrigger`` + ``maxTriggerDelay``). Both serve the structured source.
- :func:`max_messages_per_partition` and :func:`clamp` are ``DirectKafkaInputDStream``'s
  ``maxMessagesPerPartition`` and ``clamp``, for the DStream-style API: records per second per
  partition, with the backpressure rate of :mod:`~kafka_direct.planning.pid`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction

from kafka_direct.config.dstream import RateFunction
from kafka_direct.offsets import TopicPartition

__all__ = ["clamp", "max_messages_per_partition", "min_offsets_gate", "rate_limit"]


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    max_total: int | None = None,
    max_per_partition: int | None = None,
) -> dict[TopicPartition, int]:
    """Planned end offset for every partition of ``start``: ``start <= end <= latest``.

    ``max_total`` alone is ``maxOffsetsPerTrigger`` exactly as ``KafkaMicroBatchStream.rateLimit``
    applies it: each partition with backlog gets ``limit * (backlog / total backlog)`` in double
    precision, floored, or lifted to one record when that share is below one (so small
    partitions are not starved). So the total may be a little above ``max_total`` (three
    partitions sharing a limit of 1 read three records) or below it (flooring), and the end
    offsets of every micro-batch are Spark's own: a checkpoint written by ``format("kafka")``
    goes on batch for batch under ``format("kafka_direct")`` and back.

    ``max_per_partition`` (ours: Spark's structured source has no such cap; the DStream had
    ``maxRatePerPartition``) caps each partition on its own. With it, the total is exactly
    ``min(max_total, sum of capped backlogs)``: what a capped partition cannot take goes to the
    others (water-filling, largest remainders, ties in partition order).

    Partitions only in ``latest`` are not planned (the caller resolves their start first, see
    :func:`resolve_new_partitions`). A partition whose latest offset is below its start
    (offsets went backwards) keeps ``end == start``; Spark returns the lower latest offset and
    leaves it to the data-loss check.
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
    if max_total is not None and max_per_partition is None:
        take = _spark_prorate(max_total, take)
    elif max_total is not None and sum(take.values()) > max_total:
        take = _apportion(max_total, {tp: backlog[tp] for tp in take}, take)
    return {tp: off + take.get(tp, 0) for tp, off in start.items()}


def _spark_prorate(limit: int, backlog: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """``KafkaMicroBatchStream.rateLimit``'s shares, bit for bit: the same double arithmetic in
    the same order (``limit * (size / total)``), then floor, or ceil below one record."""
    total = float(sum(backlog.values()))
    if total < 1:
        return dict(backlog)
    take = {}
    for tp, size in backlog.items():
        prorate = limit * (size / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        take[tp] = min(size, share)
    return take


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


#: Records per second allowed for one partition; 0 or less means "no limit".


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
