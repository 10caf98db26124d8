"""Gaps a read cannot fill: a log end short of the range (the topic was recreated) or an
out-of-range position (the records were deleted). Runs in Spark executors (Python workers).

Both fetch loops (one range, :mod:`~kafka_direct.consumer.fetch`; a packed task,
:mod:`~kafka_direct.consumer.packed`) check such a gap against the partition's watermarks,
asked of its leader, and then apply the data-loss policy (``failOnDataLoss``) with the same
messages as the driver.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.consumer.task_consumer import OnSkip, TaskConsumer
from kafka_direct.errors import DataLossError, KafkaClientError
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.offsets import OffsetRange

__all__ = ["check_short_log", "out_of_range", "short_log_suspect"]

log = logging.getLogger(__name__)

#: Bound on a watermark lookup (only done on EOF before the range end, or out-of-range errors).
WATERMARK_TIMEOUT_S = 5.0
#: How long a failing watermark request is repeated (a leader moving), and how often.
WATERMARK_PATIENCE_S = 60.0
WATERMARK_RETRY_S = 0.5
#: Not-found answers that a moving leader gives for a partition that exists.
_PASSING_WHILE_LEADERS_MOVE = frozenset({"_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART"})


def _watermarks(pc: TaskConsumer, rng: OffsetRange) -> tuple[int, int]:
    """The partition's log start and end, asked of its leader.

    Asked only when the read stalls (EOF short of the range, or out of range), which is also
    when a leader is moving: then the answer is "not leader" or, while the metadata catches up,
    "unknown partition" (the driver saw the partition when it planned the range). Both pass, so
    they are asked again for up to ``WATERMARK_PATIENCE_S`` before the read fails; nothing is
    judged lost on an error.
    """
    tp = CkTopicPartition(rng.topic, rng.partition)
    deadline = time.monotonic() + WATERMARK_PATIENCE_S
    while True:
        try:
            with kafka_errors(f"Fetching watermarks of {rng.topic}-{rng.partition}"):
                low, high = pc.consumer.get_watermark_offsets(
                    tp, timeout=WATERMARK_TIMEOUT_S, cached=False
                )
            return int(low), int(high)
        except KafkaClientError as exc:
            passing = exc.retriable or exc.code in _PASSING_WHILE_LEADERS_MOVE
            if not passing or time.monotonic() >= deadline:
                raise
            log.info("%s; asking again", exc)
            time.sleep(WATERMARK_RETRY_S)


def short_log_suspect(nxt: int, log_end: int) -> int:
    """Where a log end short of a range (an EOF before ``until``) says the log ends, to be
    checked with :func:`check_short_log` only if the queue then brings nothing more.

    Such an EOF is mostly stale: a pooled consumer that sat at the log end between
    micro-batches queued it before the records that came since, and a read can end on it
    (its count or byte budget spent on records before the range's start). Asking the broker at
    once costs a watermark request that waits behind the consumer's own fetch long-poll on the
    same connection, up to ``fetch.wait.max.ms`` per partition (``benchmarks/bursts.py``). A
    record at or past this offset shows the EOF stale; a read that brings nothing does not."""
    return max(nxt, log_end)


def check_short_log(
    pc: TaskConsumer, rng: OffsetRange, nxt: int, fail: bool, on_skip: OnSkip | None = None
) -> int:
    """EOF before ``until``: more data is on its way, or the log shrank (topic recreated)."""
    _low, high = _watermarks(pc, rng)
    if high >= rng.until_offset:
        return nxt  # the records exist; librdkafka is still fetching them
    detail = (
        f"the range [{rng.from_offset}, {rng.until_offset}) was planned but the log now ends at "
        f"{high}; the topic may have been recreated"
    )
    return _lost(pc, rng, nxt, rng.until_offset, fail, detail, on_skip)


def out_of_range(
    pc: TaskConsumer, rng: OffsetRange, nxt: int, fail: bool, on_skip: OnSkip | None = None
) -> int:
    low, high = _watermarks(pc, rng)
    if low <= nxt < high:
        # The log moved between the error and our look (e.g. a recreated topic refilled): the
        # position is valid again, so nothing is lost; read on from it.
        log.info("Offset %d of %s-%s is readable again; resuming", nxt, rng.topic, rng.partition)
        pc.position_at(rng.topic, rng.partition, nxt)
        return nxt
    detail = f"offset {nxt} is out of range; the broker has [{low}, {high})"
    resume = low if nxt < low else rng.until_offset
    return _lost(pc, rng, nxt, min(resume, rng.until_offset), fail, detail, on_skip)


def _lost(
    pc: TaskConsumer,
    rng: OffsetRange,
    nxt: int,
    resume: int,
    fail: bool,
    detail: str,
    on_skip: OnSkip | None = None,
) -> int:
    if fail:
        raise DataLossError(rng.topic, rng.partition, detail)
    log.warning(
        "Data loss on %s-%s: %s. Skipping %d offsets (failOnDataLoss=false).",
        rng.topic,
        rng.partition,
        detail,
        resume - nxt,
    )
    if on_skip is not None and resume > nxt:
        on_skip(rng, nxt, resume)
    pc.next_offset = None
    if resume < rng.until_offset:
        pc.position_at(rng.topic, rng.partition, resume)
    return resume
