"""The direct stream's commit queue: ``CanCommitOffsets.commitAsync`` and ``commitAll``. Runs in
the Spark driver (the user's process); pure apart from the injected
:class:`~kafka_direct.stores.base.OffsetStore`.

The user's batch function queues ranges, from any thread, with
:meth:`~kafka_direct.dstream.stream.DirectKafkaStream.commitAsync`. After each batch the stream's
loop thread calls :meth:`CommitQueue.commit_all`, which saves the highest ``untilOffset`` per
partition. As in Spark, nothing is committed at queueing time: a batch whose function raised
drops its own ranges (:meth:`CommitQueue.discard_batch`), and a commit that fails stays queued
for the next batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from kafka_direct.errors import NotAuthorizedError, OffsetConflictError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores.base import OffsetStore, ends_of

__all__ = ["CommitCallback", "CommitQueue", "describe_offsets"]

log = logging.getLogger(__name__)

#: Spark's ``OffsetCommitCallback.onComplete``: the offsets, and the error or None.
CommitCallback = Callable[[dict[TopicPartition, int], "Exception | None"], object]


def describe_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    """``{topic-0: 42, ...}``, sorted, for log lines and batch descriptions."""
    return "{" + ", ".join(f"{tp}: {off}" for tp, off in sorted(offsets.items())) + "}"


class CommitQueue:
    """``commitAsync``'s queue: thread-safe; drained into one range per partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[OffsetRange] = []
        self.callback: CommitCallback | None = None

    def add(self, ranges: Iterable[OffsetRange], callback: CommitCallback | None) -> None:
        with self._lock:
            # Spark: only the most recent callback is used, and commitAsync(ranges) without one
            # sets it to null, so an earlier callback stops being called.
            self.callback = callback
            self._items.extend(ranges)

    def drain(self) -> list[OffsetRange]:
        with self._lock:
            items, self._items = self._items, []
        merged: dict[TopicPartition, OffsetRange] = {}
        for r in items:
            m = merged.get(r.topic_partition, r)
            merged[r.topic_partition] = OffsetRange(
                r.topic,
                r.partition,
                min(m.from_offset, r.from_offset),
                max(m.until_offset, r.until_offset),
            )
        return [merged[tp] for tp in sorted(merged)]

    def discard_batch(self, batch: Sequence[OffsetRange]) -> list[OffsetRange]:
        """Drop the queued ranges of a failed batch: its own, and any reaching past its start."""
        own = set(batch)
        start = {r.topic_partition: r.from_offset for r in batch}
        with self._lock:
            dropped = [
                r
                for r in self._items
                if r in own or r.until_offset > start.get(r.topic_partition, r.until_offset)
            ]
            self._items = [r for r in self._items if r not in dropped]
        return dropped

    def commit_all(self, store: OffsetStore, group_id: str) -> dict[TopicPartition, int]:
        """``commitAll``: commit what the user queued; a failed commit is queued again.

        Returns the offsets committed, empty if nothing was queued or the commit failed.
        """
        ranges = self.drain()
        if not ranges:
            return {}
        offsets = ends_of(ranges)
        callback = self.callback
        try:
            store.save(group_id, ranges)
        except (OffsetConflictError, NotAuthorizedError) as exc:
            # Another writer owns the group (committing on would hide duplicates), or the
            # principal may not commit to it (waiting cannot fix that): the stream stops.
            _notify(callback, offsets, exc, group_id)
            raise
        except Exception as exc:  # noqa: BLE001 - any store's failure: keep the offsets queued
            with self._lock:  # queued again, under the callback the user set last
                self._items[:0] = ranges
            log.warning(
                "Committing %s for group %s failed; retrying after the next batch: %s",
                describe_offsets(offsets),
                group_id,
                exc,
            )
            _notify(callback, offsets, exc, group_id)
            return {}
        log.debug("Committed %s for group %s", describe_offsets(offsets), group_id)
        _notify(callback, offsets, None, group_id)
        return offsets


def _notify(
    callback: CommitCallback | None,
    offsets: dict[TopicPartition, int],
    error: Exception | None,
    group_id: str,
) -> None:
    if callback is None:
        return
    try:
        callback(offsets, error)
    except Exception:  # a broken callback must not undo a commit that was made
        log.warning("The commitAsync callback of stream %s raised", group_id, exc_info=True)
