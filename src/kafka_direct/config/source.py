"""The source's options: parsed and validated once into frozen dataclasses. Pure: plain library.

Runs wherever a reader is built: the Spark driver's Python planner and stream-runner processes,
and (unpickled) on executors. It imports neither Spark nor the Kafka client.

Option names and meanings follow Spark's ``spark-sql-kafka-0-10`` source, so switching from
``format("kafka")`` is a change of format name. Names are case-insensitive (PySpark lower-cases
them). ``kafka.*`` options go to librdkafka without the prefix, except the keys the source owns,
which are refused with the option to use instead. Options are read by
:mod:`~kafka_direct.config.reader` (as the sink's are); which partitions a read names and where
it starts and ends are parsed by :mod:`~kafka_direct.config.bounds`.

:class:`SourceOptions` holds small frozen parts, each read by the code it configures:
:class:`TriggerRates` (admission control), :class:`Splits` (ranges into tasks),
:class:`OffsetFetch` (the driver's offset lookups), :class:`ConsumerCache` and
:class:`ExecutorReads` (the executors), :class:`GroupCommits` (the query's consumer group).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kafka_direct.config import bounds
from kafka_direct.config.bounds import OffsetBound
from kafka_direct.config.clients import (
    ExecutorSettings,
    executor_consumer_config,
    executor_group_id,
)
from kafka_direct.config.defaults import OPTION_DEFAULTS, SOURCE_OWNED_KAFKA_KEYS
from kafka_direct.config.kafka import KafkaConfig, Subscription
from kafka_direct.config.oauth import provider_spec
from kafka_direct.config.reader import OptionReader, kafka_params
from kafka_direct.config.value_format import VALUE_FORMAT_DEFAULTS, ValueFormat, parse_value_format
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange

__all__ = [
    "ConsumerCache",
    "ExecutorReads",
    "GroupCommits",
    "OffsetFetch",
    "SourceOptions",
    "Splits",
    "TriggerRates",
    "parse_source_options",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TriggerRates:
    """How much one micro-batch may take: Spark's admission control options."""

    #: 'maxOffsetsPerTrigger'
    max_offsets: int | None
    #: 'minOffsetsPerTrigger', waited for at most ``max_trigger_delay_ms`` ('maxTriggerDelay')
    min_offsets: int | None
    max_trigger_delay_ms: int
    #: 'maxOffsetsPerPartitionPerTrigger'
    max_offsets_per_partition: int | None

    @property
    def limited(self) -> bool:
        """Whether a micro-batch is capped (in total or per partition)."""
        return self.max_offsets is not None or self.max_offsets_per_partition is not None


@dataclass(frozen=True)
class Splits:
    """How planned ranges become Spark tasks."""

    #: 'minPartitions': big ranges are split until there are at least this many.
    min_partitions: int | None
    #: 'maxRecordsPerPartition': no range holds more.
    max_records_per_partition: int | None
    #: 'maxRecordsPerTask': small ranges are packed into one task up to this many records.
    max_records_per_task: int


@dataclass(frozen=True)
class OffsetFetch:
    """The driver's offset lookups: Spark's ``fetchOffset.*`` options."""

    num_retries: int
    retry_interval_ms: int
    #: 'fetchOffset.unavailableTimeout': how long a stream waits for offsets that do not come.
    unavailable_timeout_ms: int


@dataclass(frozen=True)
class ConsumerCache:
    """The executors' consumer pool: Spark's ``consumerCache.*`` options."""

    enabled: bool
    capacity: int
    timeout_ms: int


@dataclass(frozen=True)
class GroupCommits:
    """The consumer groups this query reads its start from and reports to.

    Only 'commitOffsetsToGroup' turns commits on. ``kafka.group.id`` alone is used where
    Spark uses it (the executors' group name) and by ``startingOffsets=committed``, but never
    committed to: Spark's source never commits, so a job moved from ``format("kafka")`` must
    not start moving its group, nor need rights on it.
    """

    #: ``startingOffsets=committed`` reads this group: 'commitOffsetsToGroup', else
    #: kafka.group.id, else None.
    group: str | None
    #: 'commitOffsetsToGroup' as given, else None.
    commit_group: str | None
    #: 'commitOffsets': whether finished micro-batches are committed to ``commit_group``.
    enabled: bool
    #: ``startingOffsets=committed``: earliest | latest | error for partitions with no commit.
    committed_fallback: Literal["earliest", "latest", "error"]

    @property
    def target(self) -> str | None:
        """The group finished micro-batches are committed to, or None for no commits."""
        return self.commit_group if self.enabled else None


@dataclass(frozen=True)
class ExecutorReads:
    """How executors read a range."""

    #: 'kafkaConsumer.pollTimeoutMs'
    poll_timeout_ms: int
    #: 'arrowBatchSize': rows per Arrow batch.
    batch_size: int
    #: 'maxBatchBytes' (or a twelfth of 'taskMemoryBudget'): bytes of records per Arrow batch,
    #: and the prefetch's size.
    max_batch_bytes: int
    #: 'fastPath.enabled': read through the C fast path when it is available.
    fast_path: bool


@dataclass(frozen=True)
class SourceOptions:
    """Every source option, validated, in small parts. Built by :func:`parse_source_options`."""

    strategy: Subscription
    kafka: KafkaConfig
    starting: OffsetBound
    ending: OffsetBound | None
    timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    include_headers: bool
    group_id_prefix: str
    #: 'offsetRanges': exactly these ranges (batch reads only); then nothing is planned.
    ranges: tuple[OffsetRange, ...] | None
    #: 'pushdown.enabled': batch reads narrow their ranges by the query's filters.
    pushdown: bool
    rates: TriggerRates
    splits: Splits
    fetch_offset: OffsetFetch
    consumer_cache: ConsumerCache
    commits: GroupCommits
    reads: ExecutorReads
    #: 'valueFormat' and its options: the value column as bytes, or decoded in the source.
    value_format: ValueFormat

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    @property
    def isolation_level(self) -> str:
        return self.kafka.get("isolation.level", OPTION_DEFAULTS["kafka.isolation.level"])

    def executor_settings(self) -> ExecutorSettings:
        """What read tasks need, with the executors' consumer config (see config.clients)."""
        group = executor_group_id(
            self.kafka.get("group.id"),
            self.group_id_prefix,
            self.bootstrap_servers,
            self.strategy.describe(),
        )
        config = executor_consumer_config(
            self.kafka,
            group_id=group,
            isolation_level=self.isolation_level,
            max_batch_bytes=self.reads.max_batch_bytes,
        )
        return ExecutorSettings(
            consumer_config=KafkaConfig(config),
            poll_timeout_ms=self.reads.poll_timeout_ms,
            fail_on_data_loss=self.fail_on_data_loss,
            batch_size=self.reads.batch_size,
            include_headers=self.include_headers,
            cache_enabled=self.consumer_cache.enabled,
            cache_capacity=self.consumer_cache.capacity,
            cache_timeout_s=max(self.consumer_cache.timeout_ms, 1) / 1000.0,
            fast_path=self.reads.fast_path,
            max_batch_bytes=self.reads.max_batch_bytes,
        )


def parse_source_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate every option and combination; raise :class:`ConfigurationError` on the first.

    ``streaming=None`` checks what does not depend on the mode (used when Spark asks for the
    schema, before it says whether the read is a batch or a stream).
    """
    opts = OptionReader(raw, {**OPTION_DEFAULTS, **VALUE_FORMAT_DEFAULTS}, "source")
    opts.refuse_near_misses("path")
    kafka = kafka_params(
        opts.kafka_options(),
        owned=SOURCE_OWNED_KAFKA_KEYS,
        owner="source",
        oauth_provider=opts.get("oauthProvider") or None,
    )
    ranges = bounds.offset_ranges(opts, streaming)
    strategy = bounds.subscription(opts) if ranges is None else bounds.assigned(ranges)
    starting = bounds.starting_bound(opts, streaming)
    ending = bounds.ending_bound(opts, streaming)
    timestamp_strategy: Literal["error", "latest"] = opts.choice(
        "startingOffsetsByTimestampStrategy", ("error", "latest")
    )
    bounds.check_within_assign(strategy, starting)
    if ending is not None:
        bounds.check_within_assign(strategy, ending)
    rates = _rates(opts)
    prefix = opts.text("groupIdPrefix")
    if not prefix:
        raise ConfigurationError("groupIdPrefix", prefix, "a non-empty string")
    commit_group = _commit_group(opts)
    commits = GroupCommits(
        group=commit_group or kafka.get("group.id") or None,
        commit_group=commit_group,
        enabled=opts.boolean("commitOffsets"),
        committed_fallback=opts.choice("committedOffsetsFallback", ("earliest", "latest", "error")),
    )
    if streaming and commit_group is None and kafka.get("group.id"):
        # Earlier versions committed to kafka.group.id: a job that relied on it must hear that
        # it no longer does, or its group silently falls behind.
        log.warning(
            "The stream does not commit its offsets to kafka.group.id '%s' (as Spark's "
            "connector never does); set .option('commitOffsetsToGroup', '%s') to commit them.",
            kafka["group.id"],
            kafka["group.id"],
        )
    if starting.kind == "committed" and commits.group is None:
        raise ConfigurationError(
            "startingOffsets",
            "committed",
            "a consumer group to read committed offsets from",
            "Set 'kafka.group.id' (or 'commitOffsetsToGroup') to the group's id.",
        )
    return SourceOptions(
        strategy=strategy,
        kafka=kafka,
        starting=starting,
        ending=ending,
        timestamp_strategy=timestamp_strategy,
        fail_on_data_loss=opts.boolean("failOnDataLoss"),
        include_headers=opts.boolean("includeHeaders"),
        group_id_prefix=prefix,
        ranges=ranges,
        pushdown=opts.boolean("pushdown.enabled"),
        rates=rates,
        splits=Splits(
            min_partitions=opts.optional_int("minPartitions", minimum=1),
            max_records_per_partition=opts.optional_int("maxRecordsPerPartition", minimum=1),
            max_records_per_task=opts.integer("maxRecordsPerTask", minimum=1),
        ),
        fetch_offset=OffsetFetch(
            num_retries=_attempts(opts),
            retry_interval_ms=opts.integer("fetchOffset.retryIntervalMs", minimum=0),
            unavailable_timeout_ms=opts.duration("fetchOffset.unavailableTimeout"),
        ),
        consumer_cache=ConsumerCache(
            enabled=opts.boolean("consumerCache.enabled"),
            capacity=opts.integer("consumerCache.capacity", minimum=1),
            timeout_ms=opts.integer("consumerCache.timeoutMs", minimum=0),
        ),
        commits=commits,
        reads=ExecutorReads(
            poll_timeout_ms=opts.integer("kafkaConsumer.pollTimeoutMs", minimum=1),
            batch_size=_arrow_batch_size(opts),
            max_batch_bytes=_max_batch_bytes(opts),
            # The C reader has no token callback: a token function reads through Python.
            fast_path=opts.boolean("fastPath.enabled") and provider_spec(kafka) is None,
        ),
        value_format=parse_value_format(opts, strategy),
    )


def _rates(opts: OptionReader) -> TriggerRates:
    min_trigger = opts.optional_int("minOffsetsPerTrigger", minimum=1)
    max_trigger = opts.optional_int("maxOffsetsPerTrigger", minimum=1)
    if min_trigger is not None and max_trigger is not None and min_trigger > max_trigger:
        raise ConfigurationError(
            "minOffsetsPerTrigger",
            str(min_trigger),
            f"a value <= maxOffsetsPerTrigger ({max_trigger})",
            "Lower minOffsetsPerTrigger or raise maxOffsetsPerTrigger.",
        )
    return TriggerRates(
        max_offsets=max_trigger,
        min_offsets=min_trigger,
        max_trigger_delay_ms=opts.duration("maxTriggerDelay"),
        max_offsets_per_partition=opts.optional_int("maxOffsetsPerPartitionPerTrigger", minimum=1),
    )


def _commit_group(opts: OptionReader) -> str | None:
    """'commitOffsetsToGroup': the group to commit to, the only switch that turns commits on."""
    named = opts.get("commitOffsetsToGroup")
    if named is not None and not named:
        raise ConfigurationError(
            "commitOffsetsToGroup",
            named,
            "a consumer group id",
            "Remove the option, or set 'commitOffsets' to 'false' to switch commits off.",
        )
    return named


def _attempts(opts: OptionReader) -> int:
    """'fetchOffset.numRetries': how many times an offset request is made in all, as Spark's
    KafkaOffsetReaderAdmin counts it (its default, 3, is one request and two retries)."""
    if opts.text("fetchOffset.numRetries") == "0":
        # Spark makes no attempt at 0, and fails every offset request with an assertion.
        raise ConfigurationError(
            "fetchOffset.numRetries",
            "0",
            "an integer >= 1: the number of attempts, as Spark counts it",
            "Set 1 for a single attempt with no retry; the default is 3.",
        )
    return opts.integer("fetchOffset.numRetries", minimum=1)


#: 'maxBatchBytes' bounds: a batch of at least a few records of common sizes; at most what one
#: Arrow batch's int32 offsets can hold with room to spare (Spark's JVM could not take more).
MIN_BATCH_BYTES = 64 * 1024
MAX_BATCH_BYTES = 1024 * 1024 * 1024


#: A read task's memory, in batches of 'maxBatchBytes', that 'taskMemoryBudget' allows for:
#: the prefetched queue and the fetch in flight, the records taken for a batch and the batch
#: copied from them, and the batch Spark still holds while the next is built, plus the
#: allocators' slack. Measured at 6 to 8.2 (docs/reading.md#a-tasks-memory-budget).
BATCHES_PER_TASK_BUDGET = 12


def _max_batch_bytes(opts: OptionReader) -> int:
    """'maxBatchBytes', or a twelfth of 'taskMemoryBudget' when only the budget is given."""
    if opts.get("taskMemoryBudget") is None:
        return opts.byte_size("maxBatchBytes", minimum=MIN_BATCH_BYTES, maximum=MAX_BATCH_BYTES)
    budget = opts.byte_size(
        "taskMemoryBudget",
        minimum=MIN_BATCH_BYTES * BATCHES_PER_TASK_BUDGET,
        maximum=MAX_BATCH_BYTES * BATCHES_PER_TASK_BUDGET,
    )
    if opts.get("maxBatchBytes") is None:
        return budget // BATCHES_PER_TASK_BUDGET
    chosen = opts.byte_size("maxBatchBytes", minimum=MIN_BATCH_BYTES, maximum=MAX_BATCH_BYTES)
    if chosen * BATCHES_PER_TASK_BUDGET > budget:
        raise ConfigurationError(
            "maxBatchBytes",
            opts.text("maxBatchBytes"),
            f"at most a twelfth of taskMemoryBudget ({opts.text('taskMemoryBudget')}), "
            f"{budget // BATCHES_PER_TASK_BUDGET} bytes",
            "A read task holds up to about eight batches at once (the prefetch, the batch being "
            "built and the one Spark still holds). Lower maxBatchBytes, raise "
            "taskMemoryBudget, or set only taskMemoryBudget.",
        )
    return chosen


def _arrow_batch_size(opts: OptionReader) -> int:
    size = opts.integer("arrowBatchSize", minimum=1)
    # librdkafka's consume() takes at most 1,000,000 messages per call, and one batch is read
    # with one call at most; a bigger value would fail every task with librdkafka's own error.
    if size > 1_000_000:
        raise ConfigurationError(
            "arrowBatchSize", str(size), "an integer from 1 to 1000000", "The default is 20000."
        )
    return size
