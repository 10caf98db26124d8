"""Where a read starts and ends, as concrete offsets: one set of rules for both APIs. Pure: runs
in the Spark driver; the cluster is reached through the injected
:class:`~kafka_direct.planning.reader.OffsetReader`, so unit tests use a fake.

The rules are Spark's (``KafkaOffsetReaderAdmin``), for the structured source and the
DStream-style API alike:

- **Per-partition offsets** (``startingOffsets`` JSON, a group's committed offsets, the offsets
  given to a DStream strategy or stored for its group) go through :func:`resolve_known`: -2/-1
  mean earliest/latest; a partition without one takes the fallback (earliest, latest, or an
  error naming the option); an offset beyond the log end is a configuration error (it would
  look like a recreated topic); one below the log start is data loss (``failOnDataLoss``).
- **Timestamps** resolve to the first offset whose timestamp is >= the given one. Where no record
  is that recent, starting offsets follow ``startingOffsetsByTimestampStrategy`` and ending
  offsets use latest (:func:`resolve_timestamp_offsets`).
- **Partitions that appear while a query runs** (a new topic matching the pattern, new
  partitions) start at their earliest offset, unless an offset was given or stored for them
  (DStream). A new partition that vanished again, or whose log does not start at 0, is data
  loss (Spark's ``reportDataLoss``): ``failOnDataLoss`` decides (:func:`resolve_new_partitions`).
  The structured source used to only warn there; it now follows Spark, as the DStream API did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Literal

from kafka_direct.config.bounds import OffsetBound, refuse_partitions
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from kafka_direct.planning.data_loss import (
    DataLoss,
    LossLedger,
    apply_data_loss_policy,
    detect_data_loss,
)
from kafka_direct.planning.reader import OffsetReader

__all__ = [
    "Fallback",
    "check_covers",
    "check_range_order",
    "check_within_log_end",
    "resolve_ending",
    "resolve_known",
    "resolve_new_partitions",
    "resolve_starting",
    "resolve_timestamp_offsets",
]

log = logging.getLogger(__name__)

#: What a partition without a known offset starts at.
Fallback = Literal["earliest", "latest", "error"]


def resolve_known(
    known: Mapping[TopicPartition, int],
    tps: Iterable[TopicPartition],
    reader: OffsetReader,
    *,
    fallback: Fallback,
    option: str,
    fail_on_data_loss: bool,
    missing_fix: str = "",
    refused_value: object = None,
    where: Callable[[TopicPartition], str] | None = None,
    beyond_fix: str | Callable[[TopicPartition], str] = (
        "Use -1 for latest, or check that the offsets belong to this topic."
    ),
) -> PartitionOffsets:
    """Concrete starting offsets for ``tps`` from per-partition ``known`` offsets (-2/-1 allowed).

    Partitions of ``tps`` absent from ``known`` take ``fallback``; with ``"error"`` they are a
    :class:`ConfigurationError` on ``option`` (showing ``refused_value``), ending with
    ``missing_fix``. ``where`` says, in the error for an offset past the log end, where the offset
    came from.
    """
    wanted = sorted(set(tps))
    if not wanted:
        return {}
    missing = [tp for tp in wanted if tp not in known]
    if missing and fallback == "error":
        raise ConfigurationError(
            option,
            refused_value,
            "an offset for every partition the query reads; none for "
            + ", ".join(str(tp) for tp in missing),
            missing_fix or None,
        )
    placeholder = EARLIEST if fallback == "earliest" else LATEST
    requested = {tp: known.get(tp, placeholder) for tp in wanted}
    earliest = reader.earliest(wanted)
    latest = reader.latest(wanted)
    offsets = {
        tp: earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        for tp, off in requested.items()
    }
    check_within_log_end(option, offsets, latest, beyond_fix, where)
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


def resolve_starting(
    spec: OffsetBound,
    tps: Set[TopicPartition],
    reader: OffsetReader,
    *,
    timestamp_strategy: str,
    fail_on_data_loss: bool,
    group: str | None = None,
    committed_fallback: Fallback = "error",
) -> PartitionOffsets:
    """Concrete starting offsets of the structured source for ``tps``."""
    if not tps:
        return {}
    if spec.kind == "earliest":
        return reader.earliest(tps)
    if spec.kind == "latest":
        return reader.latest(tps)
    if spec.kind == "committed":
        if group is None:
            raise ConfigurationError(
                "startingOffsets", "committed", "a consumer group", "Set 'kafka.group.id'."
            )
        return resolve_known(
            reader.committed(group, tps),
            tps,
            reader,
            fallback=committed_fallback,
            option="startingOffsets",
            refused_value="committed",
            fail_on_data_loss=fail_on_data_loss,
            missing_fix=(
                f"Group '{group}' has no committed offset for these partitions. Set "
                "'committedOffsetsFallback' to 'earliest' or 'latest' for such partitions."
            ),
        )
    if spec.kind in ("timestamp", "by_timestamp"):
        found = _lookup_timestamps(spec, tps, reader)
        return resolve_timestamp_offsets(
            _requested(spec, tps),
            found,
            reader.latest(tps),
            strategy="latest" if timestamp_strategy == "latest" else "error",
            option=spec.option,
        )
    check_covers(spec, tps)
    return resolve_known(
        spec.offsets,
        tps,
        reader,
        fallback="error",
        option=spec.option,
        fail_on_data_loss=fail_on_data_loss,
    )


def resolve_new_partitions(
    new: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    *,
    given: Mapping[TopicPartition, int] | None = None,
    latest: Mapping[TopicPartition, int] | None = None,
    fail_on_data_loss: bool | None = None,
    ledger: LossLedger | None = None,
) -> PartitionOffsets:
    """Start offsets for partitions that appeared after the query started.

    Each starts at its offset in ``given`` (the DStream's strategy offsets or stored ones), else
    at its earliest offset, so records written before its discovery are not skipped. With
    ``fail_on_data_loss`` set, Spark's checks apply (``getOffsetRangesFromResolvedOffsets``):
    a new partition with no earliest offset (it vanished again), one that does not start at 0,
    and a given offset outside ``[earliest, latest]`` are data loss. ``None`` only computes the
    offsets (for an estimate that the batch's planning checks again).
    """
    given = given or {}
    resolved: PartitionOffsets = {}
    losses: list[DataLoss] = []
    for tp in sorted(set(new)):
        if tp not in earliest:
            detail = f"Cannot find earliest offsets of {tp}. Some data may have been missed"
            losses.append(DataLoss(tp, "partition_gone", 0, None, detail))
        elif tp in given:
            resolved[tp] = given[tp]
        else:
            resolved[tp] = earliest[tp]
            if earliest[tp] != 0:
                detail = (
                    f"Added partition {tp} starts from {earliest[tp]} instead of 0. Some data "
                    "may have been missed"
                )
                losses.append(DataLoss(tp, "added_partition", 0, earliest[tp], detail))
    if fail_on_data_loss is None:
        return resolved
    if latest is not None:
        with_given = {tp: off for tp, off in resolved.items() if tp in given}
        losses += detect_data_loss(with_given, earliest, latest)
    if losses:
        resolved = apply_data_loss_policy(
            losses,
            resolved,
            earliest,
            fail_on_data_loss=fail_on_data_loss,
            logger=log,
            ledger=ledger,
        )
    if resolved:
        log.info("Partitions added: %s", {str(tp): off for tp, off in resolved.items()})
    return resolved


def resolve_ending(
    spec: OffsetBound, tps: Set[TopicPartition], reader: OffsetReader
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
    spec: OffsetBound,
    tps: Set[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> PartitionOffsets:
    check_covers(spec, tps)
    out: PartitionOffsets = {}
    for tp in sorted(tps):
        off = spec.offsets[tp]
        out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
    return out


def _requested(spec: OffsetBound, tps: Set[TopicPartition]) -> dict[TopicPartition, int]:
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        return {tp: spec.timestamp for tp in sorted(tps)}
    check_covers(spec, tps)
    return {tp: spec.offsets[tp] for tp in sorted(tps)}


def _lookup_timestamps(
    spec: OffsetBound, tps: Set[TopicPartition], reader: OffsetReader
) -> dict[TopicPartition, int | None]:
    found = reader.for_timestamps(_requested(spec, tps))
    return {tp: (off if off is not None and off >= 0 else None) for tp, off in found.items()}


def check_covers(spec: OffsetBound, tps: Set[TopicPartition]) -> None:
    """Per-partition offsets (JSON) must name every partition of ``tps`` and no other, as Spark
    asserts when it resolves them."""
    missing = sorted(set(tps) - set(spec.offsets))
    unknown = sorted(set(spec.offsets) - set(tps))
    if missing:
        raise ConfigurationError(
            spec.option,
            f"no entry for {', '.join(str(tp) for tp in missing)}",
            "an entry for every partition the query reads",
            'Add them, using -2 for earliest or -1 for latest, e.g. {"t": {"0": -2}}.',
        )
    refuse_partitions(
        spec.option,
        unknown,
        "only partitions that exist and that the query reads",
        "Remove them, or check the topic names and partition numbers.",
    )


def resolve_timestamp_offsets(
    requested: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int | None],
    latest: Mapping[TopicPartition, int],
    *,
    strategy: Literal["error", "latest"],
    option: str,
) -> dict[TopicPartition, int]:
    """Offsets for a by-timestamp option, from the broker's ``offsets_for_times`` answer.

    ``found[tp]`` is the first offset whose timestamp is at or after ``requested[tp]``; None or -1
    means no such record. Spark's ``readTimestampOffsets``: then strategy ``error`` fails and
    ``latest`` uses the latest offset. Spark always uses latest for *ending* offsets, so callers
    resolving ``endingOffsetsByTimestamp`` pass ``strategy="latest"``.
    """
    if strategy not in ("error", "latest"):
        raise ValueError(f"strategy must be 'error' or 'latest', got {strategy!r}")
    resolved: dict[TopicPartition, int] = {}
    for tp in sorted(requested):
        offset = found.get(tp)
        if offset is not None and offset >= 0:
            resolved[tp] = offset
        elif strategy == "error":
            raise ConfigurationError(
                option,
                requested[tp],
                f"a timestamp with a record at or after it in {tp} (no offset matched from "
                f"request of topic-partition {tp} and timestamp {requested[tp]})",
                "To start such partitions at their latest offset instead, set the source option "
                "'startingOffsetsByTimestampStrategy' to 'latest'.",
            )
        elif tp in latest:
            resolved[tp] = latest[tp]
        else:
            raise ValueError(f"no latest offset for {tp} to fall back to for '{option}'")
    return resolved
