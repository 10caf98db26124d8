"""Where consumed offsets live outside Spark's checkpoint: the :class:`OffsetStore` interface.
Plain library: runs in the Spark driver (the direct stream, foreachBatch helpers) and the CLI.

Spark's Kafka guide names three homes for offsets: Kafka's ``__consumer_offsets`` (visible to lag
tools), ZooKeeper, and a database such as MySQL, where exactly-once comes from writing the
results and the offsets in one transaction. Implementations: :mod:`kafka_direct.stores`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

from kafka_direct.errors import KafkaDirectError
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition

__all__ = ["OffsetStore", "OffsetStoreError", "ends_of"]


class OffsetStoreError(KafkaDirectError):
    """An offset store could not be opened: its database did not answer or refused the login,
    or its SQLite path is not a database file that can be opened.

    The message names the store as its ``repr`` does (never a password); ``__cause__`` is the
    database driver's error. Defined here, not in :mod:`kafka_direct.errors`, as the Schema
    Registry's errors are: it belongs to the stores, whose drivers are optional extras.
    """


def ends_of(ranges: Sequence[OffsetRange]) -> PartitionOffsets:
    """The highest ``untilOffset`` per partition: what committing these ranges stores."""
    ends: PartitionOffsets = {}
    for r in ranges:
        tp = TopicPartition(r.topic, r.partition)
        ends[tp] = max(ends.get(tp, r.until_offset), r.until_offset)
    return ends


class OffsetStore(ABC):
    """Stores, per consumer group and partition, the next offset to read."""

    @abstractmethod
    def load(self, group: str, tps: Iterable[TopicPartition] | None = None) -> PartitionOffsets:
        """Stored offsets of ``group`` (only ``tps`` if given); unstored partitions are absent."""

    @abstractmethod
    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        """Advance ``group`` to the end of ``ranges`` (the highest untilOffset per partition)."""

    def check_access(self, group: str) -> None:  # noqa: B027 - optional, as close()
        """Raise if this store may never hold ``group``'s offsets (a right refused), before
        a stream starts; nothing to check by default."""

    def attach_stream(self, group: str, *, fail_on_data_loss: bool) -> None:  # noqa: B027
        """Called by a direct stream that keeps ``group``'s offsets here, before its first
        batch: raise if the stream must not start (a Kafka group with active members), and
        remember what judging the stream's writes needs (``failOnDataLoss``: whether a batch
        may start past the stored offset). Nothing by default."""

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        """Release connections; the store is unusable afterwards."""

    def __enter__(self) -> OffsetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
