"""Gaps a read cannot fill: a log end short of the range (the topic was recreated) or an
out-of-range position (the records were deleted). Runs in Spark executors (Python workers).

Both fetch loops (one range, :mod:`~kafka_direct.consumer.fetch`; a packed task,
:mod:`~kafka_direct.consumer.packed`) check such a gap against the partition's watermarks,
asked of its leader, and then apply the data-loss policy (``failOnDataLoss``) with the same
messages as the driver.

A log end short of what the driver planned is believed only when the leader says so
:data:`SHORT_LOG_ANSWERS` times, :data:`SHORT_LOG_RETRY_S` apart: a replica just made leader can
answer a high watermark behind its predecessor's for a moment (KAFKA-7703), which the driver
already asks again for (``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs``). One such
answer would fail the query (``failOnDataLoss=true``: "the topic may have been recreated") or
skip records that exist (``false``). Spark's connector looks only after a whole
``kafkaConsumer.pollTimeoutMs`` without records; here the answers are spread over at most that
long, and the fetch loop reads on meanwhile, so records that arrive settle it.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.consumer.task_consumer import OnSkip, TaskConsumer
from kafka_direct.errors import DataLossError, KafkaClientError
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.offsets import OffsetRange

__all__ = [
    "SHORT_LOG_ANSWERS",
    "SHORT_LOG_RETRY_S",
    "ShortLog",
    "check_short_log",
    "out_of_range",
    "short_log_suspect",
]

log = logging.getLogger(__name__)

#: Bound on a watermark lookup (only done on EOF before the range end, or out-of-range errors).
WATERMARK_TIMEOUT_S = 5.0
#: How long a failing watermark request is repeated (a leader moving), and how often.
WATERMARK_PATIENCE_S = 60.0
WATERMARK_RETRY_S = 0.5
#: How many answers of a partition's leader must agree that its log ends short of the planned
#: range (or below a position out of range) before the data-loss policy is applied, and how far
#: apart they are asked: the defaults of the source options ``fetchOffset.numRetries`` and
#: ``fetchOffset.retryIntervalMs``, with which the driver asks again for the same reason (the
#: options themselves do not reach executors). The answers are brought closer together when
#: ``kafkaConsumer.pollTimeoutMs`` is shorter, so that they all fit in it.
SHORT_LOG_ANSWERS = 3
SHORT_LOG_RETRY_S = 1.0
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


def _retry_s(poll_timeout_ms: int) -> float:
    """How far apart the answers about a short log are asked (see :data:`SHORT_LOG_RETRY_S`)."""
    return min(SHORT_LOG_RETRY_S, poll_timeout_ms / 1000.0 / (SHORT_LOG_ANSWERS - 1))


class ShortLog:
    """A log end short of a range (an EOF before ``until``), not yet believed: where it says
    the log ends (``at``), and how many of the leader's answers agreed so far."""

    __slots__ = ("answers", "at", "due", "retry_s")

    def __init__(self, at: int, poll_timeout_ms: int) -> None:
        self.at = at
        self.answers = 0
        self.retry_s = _retry_s(poll_timeout_ms)
        #: When to ask the leader next (None: at the next read that brings nothing).
        self.due: float | None = None

    def __repr__(self) -> str:
        return f"ShortLog(at={self.at}, answers={self.answers})"


def short_log_suspect(nxt: int, log_end: int, poll_timeout_ms: int) -> ShortLog:
    """What a log end short of a range (an EOF before ``until``) says, to be checked with
    :func:`check_short_log` only if the queue then brings nothing more.

    Such an EOF is mostly stale: a pooled consumer that sat at the log end between
    micro-batches queued it before the records that came since, and a read can end on it
    (its count or byte budget spent on records before the range's start). Asking the broker at
    once costs a watermark request that waits behind the consumer's own fetch long-poll on the
    same connection, up to ``fetch.wait.max.ms`` per partition (``benchmarks/bursts.py``). A
    record at or past ``at`` shows the EOF stale; a read that brings nothing does not."""
    return ShortLog(max(nxt, log_end), poll_timeout_ms)


def check_short_log(
    pc: TaskConsumer, rng: OffsetRange, short: ShortLog, fail: bool, on_skip: OnSkip | None = None
) -> int | None:
    """EOF before ``until`` and a read that brought nothing: more data is on its way (a
    lagging leader, or librdkafka still fetching), or the log shrank (topic recreated).

    ``None`` while that is not settled: the caller reads on, and calls again after its next
    read that brings nothing (the leader is asked when :attr:`ShortLog.due`). Else the offset
    to read from: ``short.at`` when the records exist, or where the data-loss policy resumes
    once :data:`SHORT_LOG_ANSWERS` answers said the log ends short (module docstring)."""
    if short.due is not None and time.monotonic() < short.due:
        return None
    _low, high = _watermarks(pc, rng)
    if high >= rng.until_offset:
        return short.at  # the records exist; librdkafka is still fetching them
    short.answers += 1
    if short.answers < SHORT_LOG_ANSWERS:
        log.info(
            "The leader of %s-%s says its log ends at %d, short of the range [%d, %d); "
            "asking again in %.1f s before judging records lost (answer %d of %d)",
            rng.topic, rng.partition, high, rng.from_offset, rng.until_offset,
            short.retry_s, short.answers, SHORT_LOG_ANSWERS,
        )  # fmt: skip
        short.due = time.monotonic() + short.retry_s
        return None
    detail = (
        f"the range [{rng.from_offset}, {rng.until_offset}) was planned but the log now ends at "
        f"{high}; the topic may have been recreated"
    )
    return _lost(pc, rng, short.at, rng.until_offset, fail, detail, on_skip)


def out_of_range(
    pc: TaskConsumer,
    rng: OffsetRange,
    nxt: int,
    fail: bool,
    on_skip: OnSkip | None = None,
    *,
    poll_timeout_ms: int,
) -> int:
    """Offset ``nxt`` is out of range: librdkafka stopped fetching the partition. Records
    deleted below it are lost at once; a log end at or below it is asked again first (module
    docstring), waiting here: the partition brings nothing until it is positioned again."""
    low, high = _watermarks(pc, rng)
    answers = 1
    while nxt >= high and answers < SHORT_LOG_ANSWERS:
        log.info(
            "The leader of %s-%s says its log ends at %d, at or below offset %d; asking again",
            rng.topic, rng.partition, high, nxt,
        )  # fmt: skip
        time.sleep(_retry_s(poll_timeout_ms))
        low, high = _watermarks(pc, rng)
        answers += 1
    if low <= nxt < high:
        # The log moved between the error and our look (e.g. a recreated topic refilled, or a
        # new leader's high watermark caught up): the position is valid again, so nothing is
        # lost; read on from it.
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
