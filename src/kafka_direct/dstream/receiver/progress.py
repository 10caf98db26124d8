"""What a receiver stream reports per batch, and its batch-failure error. Pure: plain library
(no Spark, no Kafka client), used by the Spark driver.

A receiver batch is the blocks logged since the last one, so its progress counts blocks and
rows (exact: each block knows its row count), and its offset ranges are informational: the
receivers committed them to the group when they logged the blocks, before the batch ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafka_direct.dstream.stream import BatchInfo
from kafka_direct.errors import BatchFailedError, KafkaDirectError
from kafka_direct.offsets import OffsetRange

__all__ = ["ReceiverBatchFailedError", "ReceiverBatchInfo", "merge_ranges"]


@dataclass(frozen=True)
class ReceiverBatchInfo(BatchInfo):
    """Progress of one receiver batch. ``num_records`` is the exact row count of its blocks.

    ``recovered_blocks`` were logged by an earlier run of the stream and not processed then
    (the first batch after a restart: where repeats come from); ``paused_receivers`` were
    paused by back-pressure when the batch started. ``redelivered_records`` and
    ``rejected_records`` are a share stream's (``KafkaUtils.createShareStream``), 0 otherwise.
    """

    blocks: int = 0
    recovered_blocks: int = 0
    paused_receivers: int = 0
    #: Share streams: records the group had delivered before (a repeat if an earlier holder
    #: logged them and died before its acknowledgement reached the broker), and records the
    #: receivers rejected since the last batch (``ShareKafkaStream.rejected`` names them).
    redelivered_records: int = 0
    rejected_records: int = 0
    #: Share streams, as the receivers reported since the last batch: records held past their
    #: lock before they were logged (not logged; delivered again), and logged records whose
    #: ``ACCEPT`` the broker refused (delivered again: each is processed twice).
    lock_expired_records: int = 0
    ack_refused_records: int = 0

    def describe(self) -> str:
        ranges = ", ".join(str(r) for r in self.offset_ranges) or "no new records"
        extra = f", {self.recovered_blocks} from an earlier run" if self.recovered_blocks else ""
        paused = f", {self.paused_receivers} receiver(s) paused" if self.paused_receivers else ""
        if self.redelivered_records:
            paused += f", {self.redelivered_records} redelivered (possible repeats)"
        if self.rejected_records:
            paused += f", {self.rejected_records} rejected"
        if self.lock_expired_records:
            paused += f", {self.lock_expired_records} held past their lock"
        if self.ack_refused_records:
            paused += f", {self.ack_refused_records} acknowledgement(s) refused (repeats)"
        return (
            f"Batch {self.batch_id}: {self.num_records} records in {self.blocks} block(s)"
            f"{extra} ({ranges}) in {self.processing_time_s:.3f} s, scheduling delay "
            f"{self.scheduling_delay_s:.3f} s{paused}"
        )


def merge_ranges(ranges: Iterable[OffsetRange]) -> list[OffsetRange]:
    """One range per run of consecutive blocks of a partition. Blocks that follow each other
    (with a gap for transaction markers) merge; blocks that overlap stay apart, so records
    received twice (a partition that changed hands before its commit) show as two ranges."""
    merged: list[OffsetRange] = []
    for rng in sorted(ranges, key=lambda r: (r.topic, r.partition, r.from_offset)):
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.topic_partition == rng.topic_partition
            and rng.from_offset >= last.until_offset
        ):
            merged[-1] = OffsetRange(rng.topic, rng.partition, last.from_offset, rng.until_offset)
        else:
            merged.append(rng)
    return merged


class ReceiverBatchFailedError(BatchFailedError):
    """A receiver stream's batch function raised: the stream stopped, its blocks stay logged."""

    def __init__(
        self,
        batch_id: int,
        ranges: Sequence[OffsetRange],
        cause: BaseException,
        *,
        durable: bool,
    ) -> None:
        self.batch_id = batch_id
        self.offset_ranges = list(ranges)
        self.attempts = 1
        then = (
            "They stay in the write-ahead log: the next run of the stream processes them first."
            if durable
            else "Without the write-ahead log they are discarded as the stream stops: those "
            "records are lost (their offsets were committed when they were received)."
        )
        shown = ", ".join(str(r) for r in ranges[:5]) + (" ..." if len(ranges) > 5 else "")
        KafkaDirectError.__init__(
            self,
            f"Batch {batch_id} failed in the foreachBatch function: {type(cause).__name__}: "
            f"{cause}. Its blocks ({shown or 'no records'}) were not marked done. {then}",
        )
