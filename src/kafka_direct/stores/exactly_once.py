"""Structured Streaming on top of an offset store: resume from it, and apply each micro-batch
exactly once. Runs in the Spark driver: ``foreachBatch`` functions are called there (classic
PySpark, not Spark Connect), and ``startingOffsets`` is computed before the query starts.

The recipe, with the store as the only source of truth (the checkpoint can be thrown away)::

    store = SqlOffsetStore.postgres(dsn)
    df = (spark.readStream.format("kafka_direct")
          .option("kafka.bootstrap.servers", servers).option("subscribe", "words")
          .option("startingOffsets", starting_offsets_json(
              store, "wc", ["words"], kafka_config={"bootstrap.servers": servers}))
          .load())
    def add_counts(batch, batch_id, cur):   # batch: this micro-batch, minus what was applied
        cur.executemany("INSERT ... ON CONFLICT (word) DO UPDATE SET n = n + excluded.n", ...)
    df.writeStream.foreachBatch(exactly_once_foreach_batch(store, "wc", add_counts)).start()

**How a batch's ranges are known.** ``foreachBatch`` gets a DataFrame, not offset ranges, so the
helper derives them from the data: per partition, the lowest and highest ``offset`` in the batch.
Offsets have gaps (transaction markers, aborted records, compaction), so the batch's true start is
at or below its lowest offset. The store keeps, per partition, "every record below this offset is
applied, none at or above it", and each batch is judged against it:

- stored <= lowest offset (or nothing stored): apply the batch; store highest + 1.
- stored > highest offset: the batch was applied already. That is a replay: Spark re-runs the
  last batch after a crash between the database commit and its own checkpoint commit. Skipped and
  logged, so the query goes on instead of failing.
- stored in between: part of the batch was applied (a query restarted from an older checkpoint,
  with other batch boundaries). Only the records at or above the stored offset are passed on.

Then the stored offsets move with the conditional update "where next_offset = what was read",
in the same transaction as the user's writes. A concurrent writer of the same group thus either
loses the race (:class:`~kafka_direct.errors.OffsetConflictError`, rolled back) or, arriving after
the winner committed, finds the batch applied and skips it: nothing is ever applied twice.

The one thing the data cannot show is offsets that were never read: records below a batch's
lowest offset are taken to be gaps. Start the query from :func:`starting_offsets_json` (as above)
so that every batch begins exactly at the stored offsets, and that assumption holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kafka_direct.errors import ConfigurationError, OffsetConflictError, TopicNotFoundError
from kafka_direct.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    offsets_to_json,
)
from kafka_direct.stores.base import OffsetStore
from kafka_direct.stores.kafka_store import KafkaGroupStore
from kafka_direct.stores.sql_store import SqlOffsetStore

__all__ = [
    "BatchPlan",
    "PartitionPlan",
    "already_applied",
    "batch_bounds",
    "exactly_once_foreach_batch",
    "judge_batch",
    "starting_offsets_json",
]

log = logging.getLogger(__name__)

#: The user's function: (the batch's DataFrame, batch id, the transaction's DB-API cursor).
BatchFunction = Callable[[Any, int, Any], None]
_SOURCE_COLUMNS = ("topic", "partition", "offset")


@dataclass(frozen=True)
class PartitionPlan:
    """One partition of a micro-batch: its lowest and highest offset, and what is stored."""

    tp: TopicPartition
    first: int
    last: int
    stored: int | None

    @property
    def action(self) -> Literal["apply", "partial", "skip"]:
        if self.stored is None or self.stored <= self.first:
            return "apply"
        if self.stored > self.last:
            return "skip"
        return "partial"

    @property
    def next_offset(self) -> int:
        return self.last + 1


@dataclass(frozen=True)
class BatchPlan:
    partitions: tuple[PartitionPlan, ...]

    @property
    def claims(self) -> list[PartitionPlan]:
        """Partitions whose stored offset this batch advances."""
        return [p for p in self.partitions if p.action != "skip"]

    @property
    def replayed(self) -> list[PartitionPlan]:
        """Partitions holding records that were applied before."""
        return [p for p in self.partitions if p.action != "apply"]


def judge_batch(
    bounds: Mapping[TopicPartition, tuple[int, int]], stored: Mapping[TopicPartition, int]
) -> BatchPlan:
    """Judge a batch (lowest, highest offset per partition) against the stored offsets."""
    return BatchPlan(
        tuple(
            PartitionPlan(tp, first, last, stored.get(tp))
            for tp, (first, last) in sorted(bounds.items())
        )
    )


def batch_bounds(df: Any) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition, the lowest and highest offset in a batch DataFrame of the source."""
    from pyspark.sql import functions as F

    missing = [c for c in _SOURCE_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigurationError(
            "foreachBatch DataFrame",
            ", ".join(df.columns),
            "the source's 'topic', 'partition' and 'offset' columns",
            "Pass the DataFrame that readStream.format('kafka_direct').load() returns, "
            "and select or transform columns inside your function.",
        )
    rows = (
        df.groupBy("topic", "partition")
        .agg(F.min("offset").alias("first"), F.max("offset").alias("last"))
        .collect()
    )
    return {
        TopicPartition(str(r["topic"]), int(r["partition"])): (int(r["first"]), int(r["last"]))
        for r in rows
    }


def _unapplied(df: Any, plan: BatchPlan) -> Any:
    """The batch without the records at offsets the store says are applied."""
    from pyspark.sql import functions as F

    condition = None
    for p in plan.replayed:
        if p.stored is None:  # never true: a replayed partition has a stored offset
            continue
        applied = (
            (F.col("topic") == p.tp.topic)
            & (F.col("partition") == p.tp.partition)
            & (F.col("offset") < p.stored)
        )
        condition = ~applied if condition is None else condition & ~applied
    return df if condition is None else df.where(condition)


def exactly_once_foreach_batch(
    store: SqlOffsetStore,
    group: str,
    fn: BatchFunction,
    *,
    on_replay: Literal["skip", "error"] = "skip",
    persist: bool = True,
) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function that runs ``fn(batch_df, batch_id, cursor)`` and advances
    ``group``'s offsets in ``store``, in one database transaction.

    ``fn`` writes its results through ``cursor`` (in ``store.placeholder`` style) and must not
    commit. Records already applied are removed from ``batch_df``, and a batch applied in full
    is skipped without calling ``fn`` (see the module docstring); ``on_replay="error"`` raises
    :class:`~kafka_direct.errors.OffsetConflictError` instead. Empty batches call nothing.
    ``persist`` caches the batch, which is read twice (its offsets, then ``fn``).
    """
    if not isinstance(store, SqlOffsetStore):
        raise ConfigurationError(
            "store",
            repr(store),
            "a SqlOffsetStore",
            "A Kafka group commit cannot be part of your database's transaction; keep the "
            "offsets in the same database as the results.",
        )
    if on_replay not in ("skip", "error"):
        raise ConfigurationError("on_replay", on_replay, "'skip' or 'error'")

    def run(df: Any, batch_id: int) -> None:
        if persist:
            df = df.persist()
        try:
            _apply(store, group, fn, df, batch_id, on_replay)
        finally:
            if persist:
                df.unpersist()

    return run


def _apply(
    store: SqlOffsetStore,
    group: str,
    fn: BatchFunction,
    df: Any,
    batch_id: int,
    on_replay: str,
) -> None:
    bounds = batch_bounds(df)
    if not bounds:
        log.debug("Batch %d of group '%s' is empty", batch_id, group)
        return
    with store.session() as s:
        plan = judge_batch(bounds, s.stored(group, bounds))
        replayed = plan.replayed
        if replayed and on_replay == "error":
            raise OffsetConflictError(group, _describe(batch_id, replayed))
        if not plan.claims:
            log.info("Skipping batch %d: %s", batch_id, _describe(batch_id, replayed))
            return
        if replayed:
            log.warning("Applying part of batch %d: %s", batch_id, _describe(batch_id, replayed))
        for p in plan.claims:
            s.advance(group, p.tp, p.stored, p.next_offset)
        fn(_unapplied(df, plan), batch_id, s.cursor)
    log.debug(
        "Batch %d of group '%s' applied; next offsets %s",
        batch_id,
        group,
        {str(p.tp): p.next_offset for p in plan.claims},
    )


def _describe(batch_id: int, replayed: Sequence[PartitionPlan]) -> str:
    parts = ", ".join(
        f"{p.tp} holds offsets {p.first}..{p.last} and the store is at {p.stored}" for p in replayed
    )
    return f"batch {batch_id} was already applied in part or in full ({parts})"


def already_applied(store: OffsetStore, group: str, ranges: Sequence[OffsetRange]) -> bool:
    """Whether the store is at or past the end of every range: this batch was applied.

    For DStream-style code that catches :class:`~kafka_direct.errors.OffsetConflictError`
    from ``store.transaction`` and wants to tell a replay from a concurrent writer.
    """
    stored = store.load(group, {r.topic_partition for r in ranges})
    return all(stored.get(r.topic_partition, -1) >= r.until_offset for r in ranges)


def starting_offsets_json(
    store: OffsetStore,
    group: str,
    topics_or_partitions: Iterable[str | TopicPartition],
    fallback: Literal["earliest", "latest", "error"] = "earliest",
    *,
    kafka_config: Mapping[str, str] | None = None,
) -> str:
    """Spark's ``startingOffsets`` JSON from the store: every partition, ``-2`` (earliest) or
    ``-1`` (latest) where nothing is stored, or an error with ``fallback="error"``.

    Topic names are expanded to all their partitions through Kafka (``kafka_config``, or the
    store's own config for a :class:`KafkaGroupStore`); TopicPartitions are taken as given.
    """
    if fallback not in ("earliest", "latest", "error"):
        raise ConfigurationError("fallback", fallback, "'earliest', 'latest' or 'error'")
    tps: set[TopicPartition] = set()
    topics: list[str] = []
    for item in topics_or_partitions:
        if isinstance(item, TopicPartition):
            tps.add(item)
        else:
            topics.append(item)
    if topics:
        tps |= _partitions_of(topics, store, kafka_config)
    if not tps:
        raise ConfigurationError(
            "topics_or_partitions", [], "at least one topic or TopicPartition", None
        )
    stored = store.load(group, tps)
    missing = sorted(tps - set(stored))
    if missing and fallback == "error":
        raise ConfigurationError(
            "startingOffsets",
            f"offsets of group '{group}' in {store!r}",
            f"a stored offset for every partition; none for {', '.join(map(str, missing))}",
            "Use fallback='earliest' or 'latest' for partitions that were never read.",
        )
    unstored = EARLIEST if fallback == "earliest" else LATEST
    start: PartitionOffsets = {tp: stored.get(tp, unstored) for tp in tps}
    return json.dumps(offsets_to_json(start), separators=(",", ":"))


def _partitions_of(
    topics: Sequence[str], store: OffsetStore, kafka_config: Mapping[str, str] | None
) -> set[TopicPartition]:
    from kafka_direct.config.kafka import KafkaConfig
    from kafka_direct.kafka.offset_reader import AdminOffsetReader

    if kafka_config is not None:
        config = KafkaConfig(
            {(k[6:] if k.startswith("kafka.") else k): v for k, v in kafka_config.items()}
        )
    elif isinstance(store, KafkaGroupStore):
        config = store.kafka_config
    else:
        raise ConfigurationError(
            "kafka_config",
            None,
            "the Kafka connection settings, to list the topics' partitions",
            "Pass kafka_config={'bootstrap.servers': ...}, or TopicPartitions instead of topics.",
        )
    reader = AdminOffsetReader(config)
    try:
        known = reader.topic_partitions()
    finally:
        reader.close()
    absent = [t for t in topics if not known.get(t)]
    if absent:
        raise TopicNotFoundError(
            f"Topic(s) {', '.join(absent)} do not exist, so their starting offsets cannot be "
            "listed. Create the topic first, or check its name."
        )
    return {TopicPartition(t, p) for t in topics for p in known[t]}
