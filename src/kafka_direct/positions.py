"""Resolve where a read starts and ends into concrete offsets. Pure: runs in the Spark driver.

Takes an :class:`~kafka_direct.options.OffsetSpec` (earliest, latest, per-partition offsets with
-2/-1, one timestamp, per-partition timestamps) and answers through the
:class:`~kafka_direct.offset_reader.OffsetReader` protocol, so unit tests drive it with a fake
reader. The rules are Spark's:

- Per-partition JSON must name every partition the strategy reads; -2/-1 mean earliest/latest.
- Timestamps resolve to the first offset whose timestamp is >= the given one. Where no record is
  that recent, starting offsets follow ``startingOffsetsByTimestampStrategy`` (``error`` fails,
  ``latest`` starts at the end) and ending offsets use latest.
- A starting offset below the earliest available one is data loss (``failOnDataLoss``). One
  beyond the log end is a configuration error: it would otherwise look like a recreated topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Protocol

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from kafka_direct.options import OffsetSpec, Strategy
from kafka_direct.planning import DataLoss, apply_data_loss_policy, resolve_timestamp_offsets

__all__ = [
    "OffsetReader",
    "check_range_order",
    "check_within_log_end",
    "resolve_ending",
    "resolve_starting",
]

log = logging.getLogger(__name__)


class OffsetReader(Protocol):
    """What planning needs from the cluster. Unit tests implement it with a fake."""

    def partitions(self, strategy: Strategy) -> set[TopicPartition]: ...

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets: ...

    def latest(
        self, tps: Iterable[TopicPartition], known: Mapping[TopicPartition, int] | None = None
    ) -> PartitionOffsets: ...

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The first offset with timestamp >= stamp, or -1 where no record is that recent."""
        ...

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """The group's committed offsets; partitions without a commit are absent."""
        ...

    def close(self) -> None: ...


def resolve_starting(
    spec: OffsetSpec,
    tps: Set[TopicPartition],
    reader: OffsetReader,
    *,
    timestamp_strategy: str,
    fail_on_data_loss: bool,
    group: str | None = None,
    committed_fallback: str = "error",
) -> PartitionOffsets:
    """Concrete starting offsets for ``tps``."""
    if not tps:
        return {}
    if spec.kind == "earliest":
        return reader.earliest(tps)
    if spec.kind == "latest":
        return reader.latest(tps)
    if spec.kind == "committed":
        spec = _committed_spec(spec, tps, reader, group, committed_fallback)
    earliest = reader.earliest(tps)
    latest = reader.latest(tps)
    if spec.kind in ("timestamp", "by_timestamp"):
        found = _lookup_timestamps(spec, tps, reader)
        return resolve_timestamp_offsets(
            _requested(spec, tps),
            found,
            latest,
            strategy="latest" if timestamp_strategy == "latest" else "error",
            option=spec.option,
        )
    offsets = _specific(spec, tps, earliest, latest)
    check_within_log_end(
        spec.option,
        offsets,
        latest,
        "Use -1 for latest, or check that the offsets belong to this topic.",
    )
    losses = [
        DataLoss(
            tp,
            "offset_out_of_range",
            off,
            earliest[tp],
            f"starting offset {off} is before the earliest available offset {earliest[tp]}",
        )
        for tp, off in sorted(offsets.items())
        if off < earliest[tp]
    ]
    if losses:
        return apply_data_loss_policy(
            losses, offsets, earliest, fail_on_data_loss=fail_on_data_loss, logger=log
        )
    return offsets


def _committed_spec(
    spec: OffsetSpec,
    tps: Set[TopicPartition],
    reader: OffsetReader,
    group: str | None,
    fallback: str,
) -> OffsetSpec:
    """``startingOffsets=committed`` as per-partition offsets, with the fallback applied."""
    if group is None:
        raise ConfigurationError(
            "startingOffsets", "committed", "a consumer group", "Set 'kafka.group.id'."
        )
    committed = reader.committed(group, tps)
    missing = sorted(set(tps) - set(committed))
    if missing and fallback == "error":
        raise ConfigurationError(
            "startingOffsets",
            "committed",
            f"a committed offset of group '{group}' for every partition; none for "
            + ", ".join(str(tp) for tp in missing),
            "Set 'committedOffsetsFallback' to 'earliest' or 'latest' for such partitions.",
        )
    placeholder = EARLIEST if fallback == "earliest" else LATEST
    offsets = {**{tp: placeholder for tp in missing}, **committed}
    return OffsetSpec("specific", offsets=offsets, option="startingOffsets")


def resolve_ending(
    spec: OffsetSpec, tps: Set[TopicPartition], reader: OffsetReader
) -> PartitionOffsets:
    """Concrete ending offsets (exclusive) for a batch read."""
    if not tps:
        return {}
    latest = reader.latest(tps)
    if spec.kind == "latest":
        return latest
    if spec.kind in ("timestamp", "by_timestamp"):
        found = _lookup_timestamps(spec, tps, reader)
        # Spark: an ending timestamp with no matching record means "up to the latest offset".
        return {
            tp: off if off is not None and off >= 0 else latest[tp] for tp, off in found.items()
        }
    ending = _specific(spec, tps, reader.earliest(tps), latest)
    # Executors would wait kafkaConsumer.pollTimeoutMs for offsets that do not exist yet.
    check_within_log_end(spec.option, ending, latest, "Use -1 for latest, or a smaller offset.")
    return ending


def check_within_log_end(
    option: str,
    offsets: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    fix: str | Callable[[TopicPartition], str],
    where: Callable[[TopicPartition], str] | None = None,
) -> None:
    """Refuse an offset past its partition's log end: it does not exist (yet), and reading from
    it would look like a recreated topic or wait for a poll timeout."""
    beyond = sorted(tp for tp, off in offsets.items() if off > latest[tp])
    if not beyond:
        return
    tp = beyond[0]
    shown = f"{tp}: {offsets[tp]}" + (f" ({where(tp)})" if where else "")
    raise ConfigurationError(
        option,
        shown,
        f"an offset <= the log end offset {latest[tp]} of {tp}",
        fix if isinstance(fix, str) else fix(tp),
    )


def check_range_order(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> None:
    """A batch's start must not be after its end (Spark asserts the same in KafkaRelation)."""
    for tp in sorted(start):
        if tp in end and end[tp] < start[tp]:
            raise ConfigurationError(
                "startingOffsets/endingOffsets",
                f"{tp}: start {start[tp]}, end {end[tp]}",
                "a starting offset <= the ending offset for every partition",
                "Fix the offsets, or check that the topic was not recreated.",
            )


def _specific(
    spec: OffsetSpec,
    tps: Set[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> PartitionOffsets:
    _check_covers(spec, tps)
    out: PartitionOffsets = {}
    for tp in sorted(tps):
        off = spec.offsets[tp]
        out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
    return out


def _requested(spec: OffsetSpec, tps: Set[TopicPartition]) -> dict[TopicPartition, int]:
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        return {tp: spec.timestamp for tp in sorted(tps)}
    _check_covers(spec, tps)
    return {tp: spec.offsets[tp] for tp in sorted(tps)}


def _lookup_timestamps(
    spec: OffsetSpec, tps: Set[TopicPartition], reader: OffsetReader
) -> dict[TopicPartition, int | None]:
    found = reader.for_timestamps(_requested(spec, tps))
    return {tp: (off if off is not None and off >= 0 else None) for tp, off in found.items()}


def _check_covers(spec: OffsetSpec, tps: Set[TopicPartition]) -> None:
    missing = sorted(set(tps) - set(spec.offsets))
    unknown = sorted(set(spec.offsets) - set(tps))
    if missing:
        raise ConfigurationError(
            spec.option,
            f"no entry for {', '.join(str(tp) for tp in missing)}",
            "an entry for every partition the query reads",
            'Add them, using -2 for earliest or -1 for latest, e.g. {"t": {"0": -2}}.',
        )
    if unknown:
        raise ConfigurationError(
            spec.option,
            ", ".join(str(tp) for tp in unknown),
            "only partitions that exist and that the query reads",
            "Remove them, or check the topic names and partition numbers.",
        )
