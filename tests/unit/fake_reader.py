"""An in-memory Kafka cluster and a fake :class:`kafka_direct.planning.reader.OffsetReader` over it.

For unit tests of driver-side planning, which must not need a broker: thousands of cluster
states (timestamps, added partitions, aged-out data, faults) in milliseconds. What Apache Kafka
itself answers is read end to end in tests/integration (test_real_kafka_behaviour.py,
test_retention.py, test_compaction.py).

The model::

    FakeCluster.topics: {topic: [FakePartition, ...]}    # index = partition number
    FakePartition: log_start, log_end, records [(offset, timestamp), ...]

``log_end`` is the next offset to be written (Kafka's latest offset / high watermark), which may be
above the last record's offset + 1 when the log ends on a gap (transaction markers). Tests mutate
the cluster between calls; every reader built on it sees the change at once, as a real admin client
would on its next request.

:class:`FakeOffsetReader` answers like ``kafka_direct.kafka.offset_reader.AdminOffsetReader``:

- ``partitions``: ``subscribe`` leaves missing topics out; ``subscribePattern`` and ``assign``
  follow the caller's rules (``STRUCTURED``: the pattern anywhere in a name, an assigned partition
  its topic lacks left out; ``DSTREAM``: whole names, such a partition refused), and an assigned
  topic the cluster does not have raises :class:`TopicNotFoundError`, with the same helpers as
  the real reader (:mod:`kafka_direct.planning.reader`);
- ``earliest``/``latest``/``for_timestamps`` raise :class:`TopicNotFoundError` for unknown
  partitions, like ``list_offsets`` does;
- ``for_timestamps`` returns the first retained offset whose timestamp is >= the given one, and -1
  where no record is that recent (what real Kafka does, and Tansu does not).
- ``timestamp_types`` answers each topic's ``message.timestamp.type`` from
  ``cluster.timestamp_types`` (``CreateTime`` unless set), and raises :class:`TopicNotFoundError`
  for a topic the cluster does not have, as DescribeConfigs does. It does not stamp records: a
  test of a ``LogAppendTime`` topic appends them with increasing timestamps, as a broker would.

Every call is counted (``reader.calls["latest"]``) and logged with its arguments (``reader.log``),
so tests can assert how often planning talks to the cluster. A reader refuses to be pickled: code
that pickles a planner must drop its live reader first.

Faults, as ``AdminOffsetReader`` reports them: ``cluster.unavailable[tp] = reason`` makes every
offset lookup that includes ``tp`` raise :class:`OffsetsUnavailableError` with the other
partitions' answers; ``cluster.down = True`` makes every call fail with a retriable
:class:`KafkaClientError`, as a cluster that does not answer at all; ``cluster.metadata_down =
True`` does that to partition discovery alone (a metadata request sent to a slow broker);
``cluster.stale_latest[tp] = offset`` makes the next latest-offset lookup of ``tp`` answer that
offset (a new leader behind the old one's log end), once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_direct.config.kafka import Subscription
from kafka_direct.errors import KafkaClientError, OffsetsUnavailableError, TopicNotFoundError
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.planning.reader import (
    SubscriptionRules,
    assigned_partitions,
    matching_topics,
    rules_for,
)

__all__ = ["FakeCluster", "FakeOffsetReader", "FakePartition"]


@dataclass
class FakePartition:
    """One partition's log: offsets ``[log_start, log_end)``, records where no gap is."""

    log_start: int = 0
    log_end: int = 0
    records: list[tuple[int, int]] = field(default_factory=list)  # (offset, timestamp)


class FakeCluster:
    """Topics → partitions → logs. Mutable: tests change it between planner calls."""

    def __init__(self, *, now_ms: int = 1_000) -> None:
        self.topics: dict[str, list[FakePartition]] = {}
        #: Consumer groups' committed offsets: group → {tp: next offset}.
        self.groups: dict[str, dict[TopicPartition, int]] = {}
        #: Timestamp given to records appended without explicit timestamps.
        self.now_ms = now_ms
        #: Partitions whose offset lookups get no valid answer, with the reason.
        self.unavailable: dict[TopicPartition, str] = {}
        #: True: the whole cluster does not answer.
        self.down = False
        #: True: metadata requests (partition discovery) get no answer; offset lookups do.
        self.metadata_down = False
        #: Topics' message.timestamp.type where it is not CreateTime: topic → "LogAppendTime".
        self.timestamp_types: dict[str, str] = {}
        #: Log ends that the next latest-offset lookup of a partition answers instead of the
        #: real one, once each: a lagging replica just made leader (KAFKA-7703).
        self.stale_latest: dict[TopicPartition, int] = {}

    # -- topics and partitions -----------------------------------------------------------------

    def create_topic(
        self, topic: str, partitions: int = 1, records: int | Sequence[int] = 0
    ) -> None:
        """Create ``topic``; ``records`` is a count for every partition, or one per partition."""
        if topic in self.topics:
            raise ValueError(f"topic {topic} already exists")
        self.topics[topic] = [FakePartition() for _ in range(partitions)]
        counts = [records] * partitions if isinstance(records, int) else list(records)
        if len(counts) != partitions:
            raise ValueError("one record count per partition")
        for partition, count in enumerate(counts):
            self.append(topic, partition, count)

    def add_partitions(self, topic: str, count: int = 1) -> None:
        """CreatePartitions: ``count`` new, empty partitions at the end of ``topic``."""
        self.topics[topic].extend(FakePartition() for _ in range(count))

    def delete_topic(self, topic: str) -> None:
        del self.topics[topic]

    def recreate_topic(
        self, topic: str, partitions: int = 1, records: int | Sequence[int] = 0
    ) -> None:
        """Delete and create again: offsets start over at 0 (data loss, offsets go backwards)."""
        self.delete_topic(topic)
        self.create_topic(topic, partitions, records)

    # -- records -------------------------------------------------------------------------------

    def log(self, topic: str, partition: int) -> FakePartition:
        return self.topics[topic][partition]

    def append(
        self,
        topic: str,
        partition: int,
        count: int = 1,
        *,
        timestamps: Sequence[int] | None = None,
    ) -> list[int]:
        """Produce ``count`` records (or one per timestamp); returns their offsets."""
        log = self.log(topic, partition)
        stamps = list(timestamps) if timestamps is not None else [self.now_ms] * count
        offsets = []
        for stamp in stamps:
            log.records.append((log.log_end, stamp))
            offsets.append(log.log_end)
            log.log_end += 1
        return offsets

    def gap(self, topic: str, partition: int, count: int = 1) -> None:
        """Offsets that hold no record (transaction markers, compaction)."""
        self.log(topic, partition).log_end += count

    def age_out(self, topic: str, partition: int, new_log_start: int) -> None:
        """Retention/DeleteRecords: everything below ``new_log_start`` is gone."""
        log = self.log(topic, partition)
        if not log.log_start <= new_log_start <= log.log_end:
            raise ValueError(f"log start {new_log_start} outside [{log.log_start}, {log.log_end}]")
        log.log_start = new_log_start
        log.records = [(off, ts) for off, ts in log.records if off >= new_log_start]

    # -- views ---------------------------------------------------------------------------------

    def topic_partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, parts in self.topics.items() for p in range(len(parts))}

    def reader(self) -> FakeOffsetReader:
        return FakeOffsetReader(self)


class FakeOffsetReader:
    """:class:`kafka_direct.planning.reader.OffsetReader` over a :class:`FakeCluster`, counting
    calls."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.calls: Counter[str] = Counter()
        #: (method, argument) per call, in order; the argument is the request as a plain value.
        self.log: list[tuple[str, Any]] = []
        self.closed = False

    def __reduce__(self) -> Any:
        raise TypeError("FakeOffsetReader is a live client and must not be pickled")

    def _record(self, method: str, arg: Any) -> None:
        if self.closed:
            raise RuntimeError(f"{method}() called on a closed FakeOffsetReader")
        self.calls[method] += 1
        self.log.append((method, arg))
        if self.cluster.down:
            raise KafkaClientError(
                f"{method}: Local: Broker transport failure (_TRANSPORT)",
                code="_TRANSPORT",
                retriable=True,
            )

    def _answer(self, kind: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        missing = {tp: why for tp, why in self.cluster.unavailable.items() if tp in offsets}
        if not missing:
            return offsets
        valid = {tp: off for tp, off in offsets.items() if tp not in missing}
        raise OffsetsUnavailableError(
            f"no valid {kind} offset for {len(missing)} partition(s)",
            offsets=valid,
            unavailable=missing,
        )

    def _log_of(self, tp: TopicPartition) -> FakePartition:
        parts = self.cluster.topics.get(tp.topic)
        if parts is None or not 0 <= tp.partition < len(parts):
            raise TopicNotFoundError(
                f"Listing offsets of {tp}: Broker: Unknown topic or partition",
                code="UNKNOWN_TOPIC_OR_PART",
            )
        return parts[tp.partition]

    # -- the OffsetReader protocol -------------------------------------------------------------

    def partitions(
        self, strategy: Subscription, *, rules: SubscriptionRules | None = None
    ) -> set[TopicPartition]:
        rules = rules_for(strategy, rules)
        self._record("partitions", strategy)
        if self.cluster.metadata_down:
            raise KafkaClientError(
                "Fetching topic metadata: Local: Timed out (_TIMED_OUT)",
                code="_TIMED_OUT",
                retriable=True,
            )
        existing = self.cluster.topic_partitions()
        if strategy.kind == "subscribe":
            return {tp for tp in existing if tp.topic in strategy.topics}
        if strategy.kind == "subscribePattern":
            names = matching_topics(strategy.pattern or "", self.cluster.topics, rules.pattern)
            return {tp for tp in existing if tp.topic in names}
        topics = {t: range(len(parts)) for t, parts in self.cluster.topics.items()}
        return assigned_partitions(strategy.partitions, topics, rules)

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        wanted = sorted(set(tps))
        self._record("earliest", wanted)
        return self._answer("earliest", {tp: self._log_of(tp).log_start for tp in wanted})

    def latest(
        self, tps: Iterable[TopicPartition], known: Mapping[TopicPartition, int] | None = None
    ) -> PartitionOffsets:
        wanted = sorted(set(tps))
        self._record("latest", wanted)
        ends = {tp: self._log_of(tp).log_end for tp in wanted}
        ends.update({tp: self.cluster.stale_latest.pop(tp) for tp in wanted
                     if tp in self.cluster.stale_latest})  # fmt: skip
        return self._answer("latest", ends)

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        self._record("for_timestamps", dict(stamps))
        out: dict[TopicPartition, int] = {}
        for tp, stamp in stamps.items():
            log = self._log_of(tp)
            out[tp] = next((off for off, ts in log.records if ts >= stamp), -1)
        return self._answer("timestamp", out)

    def timestamp_types(self, topics: Iterable[str]) -> dict[str, str]:
        wanted = sorted(set(topics))
        self._record("timestamp_types", wanted)
        missing = [t for t in wanted if t not in self.cluster.topics]
        if missing:
            raise TopicNotFoundError(
                f"Describing the config of topic {missing[0]}: Broker: Unknown topic or partition",
                code="UNKNOWN_TOPIC_OR_PART",
            )
        return {t: self.cluster.timestamp_types.get(t, "CreateTime") for t in wanted}

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        wanted = sorted(set(tps))
        self._record("committed", (group, wanted))
        stored = self.cluster.groups.get(group, {})
        return {tp: stored[tp] for tp in wanted if tp in stored}

    def close(self) -> None:
        self.calls["close"] += 1
        self.closed = True
