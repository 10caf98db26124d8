"""The source's options: parsed and validated once into frozen dataclasses. Pure: plain library.

Runs wherever a reader is built: the Spark driver's Python planner and stream-runner processes,
and (unpickled) on executors. It imports neither Spark nor the Kafka client.

Option names and meanings follow Spark's ``spark-sql-kafka-0-10`` source, so switching from
``format("kafka")`` is a change of format name. Names are case-insensitive (PySpark lower-cases
them). ``kafka.*`` options go to librdkafka without the prefix, except the keys the source owns,
which are refused with the option to use instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kafka_direct.config.clients import (
    ExecutorSettings,
    executor_consumer_config,
    executor_group_id,
)
from kafka_direct.config.defaults import OPTION_DEFAULTS, SOURCE_OWNED_KAFKA_KEYS
from kafka_direct.config.kafka import KafkaConfig, Subscription
from kafka_direct.config.reader import OptionReader, kafka_params
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import (
    EARLIEST,
    OffsetRange,
    PartitionOffsets,
    parse_assign,
    parse_offsets_option,
    parse_ranges_option,
    parse_timestamps_option,
)

__all__ = [
    "ConsumerCache",
    "ExecutorReads",
    "GroupCommits",
    "OffsetBound",
    "OffsetFetch",
    "SourceOptions",
    "Splits",
    "TriggerRates",
    "parse_source_options",
]


@dataclass(frozen=True)
class OffsetBound:
    """Where a read starts or ends, before it is resolved against the broker.

    ``kind`` is one of: ``earliest``, ``latest``, ``specific`` (per-partition offsets, which may
    hold -2/-1), ``timestamp`` (one timestamp for all partitions), ``by_timestamp``
    (per-partition timestamps) and ``committed`` (the consumer group's committed offsets).
    """

    kind: Literal["earliest", "latest", "specific", "timestamp", "by_timestamp", "committed"]
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None
    option: str = "startingOffsets"


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
    """The consumer group this query reports to, and what it does with it."""

    #: 'commitOffsetsToGroup', else kafka.group.id, else None.
    group: str | None
    #: 'commitOffsets': whether finished micro-batches are committed to ``group``.
    enabled: bool
    #: ``startingOffsets=committed``: earliest | latest | error for partitions with no commit.
    committed_fallback: Literal["earliest", "latest", "error"]

    @property
    def target(self) -> str | None:
        """The group finished micro-batches are committed to, or None for no commits."""
        return self.group if self.enabled else None


@dataclass(frozen=True)
class ExecutorReads:
    """How executors read a range."""

    #: 'kafkaConsumer.pollTimeoutMs'
    poll_timeout_ms: int
    #: 'arrowBatchSize': rows per Arrow batch.
    batch_size: int
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
            self.kafka, group_id=group, isolation_level=self.isolation_level
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
        )


def parse_source_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate every option and combination; raise :class:`ConfigurationError` on the first.

    ``streaming=None`` checks what does not depend on the mode (used when Spark asks for the
    schema, before it says whether the read is a batch or a stream).
    """
    opts = OptionReader(raw, OPTION_DEFAULTS, "source")
    opts.refuse_near_misses("path")
    kafka = kafka_params(opts.kafka_options(), owned=SOURCE_OWNED_KAFKA_KEYS, owner="source")
    ranges = _ranges(opts, streaming)
    strategy = _strategy(opts) if ranges is None else _assigned(ranges)
    starting = _starting(opts, streaming)
    ending = _ending(opts, streaming)
    timestamp_strategy: Literal["error", "latest"] = opts.choice(
        "startingOffsetsByTimestampStrategy", ("error", "latest")
    )
    _check_offsets_match_assign(strategy, starting)
    if ending is not None:
        _check_offsets_match_assign(strategy, ending)
    rates = _rates(opts)
    prefix = opts.text("groupIdPrefix")
    if not prefix:
        raise ConfigurationError("groupIdPrefix", prefix, "a non-empty string")
    commits = GroupCommits(
        group=_group(opts, kafka),
        enabled=opts.boolean("commitOffsets"),
        committed_fallback=opts.choice("committedOffsetsFallback", ("earliest", "latest", "error")),
    )
    if starting.kind == "committed" and not (
        opts.get("commitOffsetsToGroup") or kafka.get("group.id")
    ):
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
            num_retries=opts.integer("fetchOffset.numRetries", minimum=0),
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
            fast_path=opts.boolean("fastPath.enabled"),
        ),
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


def _group(opts: OptionReader, kafka: KafkaConfig) -> str | None:
    """The query's consumer group: 'commitOffsetsToGroup', else kafka.group.id, else none."""
    named = opts.get("commitOffsetsToGroup")
    if named is not None and not named:
        raise ConfigurationError(
            "commitOffsetsToGroup",
            named,
            "a consumer group id",
            "Remove the option, or set 'commitOffsets' to 'false' to switch commits off.",
        )
    return named or kafka.get("group.id") or None


def _arrow_batch_size(opts: OptionReader) -> int:
    size = opts.integer("arrowBatchSize", minimum=1)
    # librdkafka's consume() takes at most 1,000,000 messages per call, and one batch is read
    # with one call at most; a bigger value would fail every task with librdkafka's own error.
    if size > 1_000_000:
        raise ConfigurationError(
            "arrowBatchSize", str(size), "an integer from 1 to 1000000", "The default is 20000."
        )
    return size


_NOT_WITH_RANGES = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
)


def _ranges(opts: OptionReader, streaming: bool | None) -> tuple[OffsetRange, ...] | None:
    """``offsetRanges``: exact ranges to read, Spark's ``KafkaUtils.createRDD`` as an option."""
    raw = opts.get("offsetRanges")
    if raw is None:
        return None
    if streaming:
        raise ConfigurationError(
            "offsetRanges",
            raw,
            "no fixed ranges in a streaming query",
            "A stream plans its own ranges: remove the option, or use spark.read.",
        )
    clash = [name for name in _NOT_WITH_RANGES if opts.get(name) is not None]
    if clash:
        raise ConfigurationError(
            "offsetRanges",
            raw,
            f"no {', '.join(repr(c) for c in clash)} beside it",
            "The ranges name the partitions and their offsets: remove the other options.",
        )
    ranges = parse_ranges_option(raw)
    if not ranges:
        raise ConfigurationError("offsetRanges", raw, "at least one range")
    return tuple(ranges)


def _assigned(ranges: tuple[OffsetRange, ...]) -> Subscription:
    return Subscription("assign", partitions=tuple(sorted({r.topic_partition for r in ranges})))


def _strategy(opts: OptionReader) -> Subscription:
    # Presence, not truthiness: an empty 'subscribe' is reported as such, not as "not set".
    given = [
        name for name in ("subscribe", "subscribePattern", "assign") if opts.get(name) is not None
    ]
    if len(given) != 1:
        raise ConfigurationError(
            "subscribe/subscribePattern/assign",
            ", ".join(given) or None,
            "exactly one of 'subscribe', 'subscribePattern' or 'assign'",
            "Choose one way to name the partitions to read and remove the others.",
        )
    kind = given[0]
    value = opts.get(kind) or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigurationError("subscribe", value, "a comma-separated list of topics")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribePattern":
        if not value:
            # An empty regex matches every topic; never read the whole cluster by accident.
            raise ConfigurationError("subscribePattern", value, "a non-empty regular expression")
        try:
            re.compile(value)
        except re.error as exc:
            raise ConfigurationError(
                "subscribePattern", value, "a valid regular expression", f"It fails with: {exc}."
            ) from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", partitions=tuple(parse_assign(value)))


def _starting(opts: OptionReader, streaming: bool | None) -> OffsetBound:
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
    spec = _timestamp_spec(opts, "startingTimestamp", "startingOffsetsByTimestamp")
    if spec is not None:
        return spec
    raw = opts.get("startingOffsets")
    if raw is None:
        return OffsetBound("latest" if streaming else "earliest")
    lowered = raw.lower()
    if lowered == "earliest":
        return OffsetBound("earliest")
    if lowered == "committed":
        return OffsetBound("committed")
    if lowered == "latest":
        if streaming is False:
            raise ConfigurationError(
                "startingOffsets",
                raw,
                "'earliest' or per-partition JSON in a batch query",
                "'latest' would read nothing in a batch query; use it with readStream.",
            )
        return OffsetBound("latest")
    if not raw.startswith("{"):
        raise ConfigurationError(
            "startingOffsets",
            raw,
            (
                "'earliest', 'committed' or"
                if streaming is False
                else "'earliest', 'latest', 'committed' or"
            )
            + ' JSON such as {"t": {"0": 42}}',
        )
    offsets = parse_offsets_option(raw, "startingOffsets", allow_latest=streaming is not False)
    return OffsetBound("specific", offsets=offsets)


def _ending(opts: OptionReader, streaming: bool | None) -> OffsetBound | None:
    given = [
        n for n in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp") if opts.get(n)
    ]
    if streaming:
        if given:
            raise ConfigurationError(
                given[0],
                opts.get(given[0]),
                "no ending offset in a streaming query",
                "A stream has no end: remove the option, or use spark.read for a bounded batch.",
            )
        return None
    spec = _timestamp_spec(opts, "endingTimestamp", "endingOffsetsByTimestamp")
    if spec is not None:
        return spec
    raw = opts.get("endingOffsets")
    if raw is None or raw.lower() == "latest":
        return OffsetBound("latest", option="endingOffsets")
    if raw.lower() == "earliest" or not raw.startswith("{"):
        raise ConfigurationError(
            "endingOffsets",
            raw,
            '\'latest\' or per-partition JSON such as {"t": {"0": 42, "1": -1}}',
            "'earliest' would make every range empty.",
        )
    offsets = parse_offsets_option(raw, "endingOffsets", allow_latest=True)
    bad = sorted(tp for tp, off in offsets.items() if off == EARLIEST)
    if bad:
        raise ConfigurationError(
            "endingOffsets", raw, f"offsets >= 0 or -1 (latest); -2 (earliest) given for {bad[0]}"
        )
    return OffsetBound("specific", offsets=offsets, option="endingOffsets")


def _timestamp_spec(
    opts: OptionReader, global_name: str, by_partition_name: str
) -> OffsetBound | None:
    stamp = opts.get(global_name)
    if stamp is not None:
        try:
            value = int(stamp)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigurationError(global_name, stamp, "epoch milliseconds as an integer >= 0")
        return OffsetBound("timestamp", timestamp=value, option=global_name)
    by_partition = opts.get(by_partition_name)
    if by_partition is not None:
        stamps = parse_timestamps_option(by_partition, by_partition_name)
        return OffsetBound("by_timestamp", offsets=stamps, option=by_partition_name)
    return None


def _check_offsets_match_assign(strategy: Subscription, spec: OffsetBound) -> None:
    if strategy.kind != "assign" or spec.kind not in ("specific", "by_timestamp"):
        return
    extra = sorted(set(spec.offsets) - set(strategy.partitions))
    if extra:
        raise ConfigurationError(
            spec.option,
            ", ".join(str(tp) for tp in extra),
            "only partitions listed in 'assign'",
            "Add them to 'assign' or remove them from the offsets.",
        )
