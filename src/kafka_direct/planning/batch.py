"""The ranges of a batch read (``spark.read``): Spark's ``KafkaRDD`` offset ranges. Runs in
the Spark driver (the planner process); pure apart from the injected offset reader.

Ranges come from the starting and ending offsets (:func:`plan_batch_read`), or exactly from the
``offsetRanges`` option (:func:`plan_given_ranges`: the DStream API's batches and ``createRDD``).
Either way the query's pushed filters then narrow them (:mod:`kafka_direct.planning.pushdown`),
before they are split into Spark partitions, so ``minPartitions`` and
``maxRecordsPerPartition`` split what is actually read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kafka_direct.config.source import SourceOptions
from kafka_direct.errors import TopicNotFoundError
from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.pushdown import Predicate, describe_pushed, narrow_ranges
from kafka_direct.planning.reader import STRUCTURED, OffsetReader
from kafka_direct.planning.resolve import (
    check_range_order,
    resolve_ending,
    resolve_starting,
)
from kafka_direct.planning.splits import split_ranges

__all__ = ["plan_batch_read", "plan_given_ranges"]

log = logging.getLogger(__name__)


def plan_batch_read(
    opts: SourceOptions, reader: OffsetReader, pushed: Sequence[Predicate] = ()
) -> list[OffsetRange]:
    """Ranges of a batch read (``spark.read``): starting to ending offsets, narrowed by the
    ``pushed`` filters, split."""
    tps = reader.partitions(opts.strategy, rules=STRUCTURED)
    if opts.strategy.kind == "subscribe":
        missing = sorted(set(opts.strategy.topics) - {tp.topic for tp in tps})
        if missing:
            # Spark would return an empty batch; a missing topic in a bounded read is almost
            # always a typo, so say so instead of returning nothing.
            raise TopicNotFoundError(
                f"Option 'subscribe' names topic(s) {', '.join(missing)}, which the cluster does "
                "not have. Create them first or fix the topic names."
            )
    assert opts.ending is not None
    # The options are resolved and checked in full before any filter narrows them, so a query
    # fails (or not) exactly as it would without pushdown.
    start = resolve_starting(
        opts.starting,
        tps,
        reader,
        timestamp_strategy=opts.timestamp_strategy,
        fail_on_data_loss=opts.fail_on_data_loss,
        group=opts.commits.group,
        committed_fallback=opts.commits.committed_fallback,
    )
    end = resolve_ending(opts.ending, tps, reader)
    check_range_order(start, end)
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(start)]
    return _split(opts, _narrow(ranges, pushed, reader))


def plan_given_ranges(opts: SourceOptions, pushed: Sequence[Predicate] = ()) -> list[OffsetRange]:
    """The ``offsetRanges`` of a batch read, narrowed by the ``pushed`` filters, split.

    Nothing is asked of the cluster: such ranges come from a planner that has just asked
    (the DStream API, ``createRDD``), and a round trip per batch would cost more than it saves.
    So filters on topic, partition and offset narrow them, and timestamp bounds are left to Spark.
    """
    assert opts.ranges is not None
    return _split(opts, _narrow(list(opts.ranges), pushed, None))


def _narrow(
    ranges: list[OffsetRange], pushed: Sequence[Predicate], reader: OffsetReader | None
) -> list[OffsetRange]:
    if not pushed:
        return ranges
    narrowed = narrow_ranges(ranges, pushed, reader)
    log.info(
        "Filter pushdown (%s): %d of %d offsets left to read (%s)",
        describe_pushed(pushed),
        narrowed.offsets_after,
        narrowed.offsets_before,
        "; ".join(narrowed.notes) or "nothing narrowed",
    )
    return narrowed.ranges


def _split(opts: SourceOptions, ranges: list[OffsetRange]) -> list[OffsetRange]:
    return split_ranges(
        ranges,
        min_partitions=opts.splits.min_partitions,
        max_records_per_partition=opts.splits.max_records_per_partition,
    )
