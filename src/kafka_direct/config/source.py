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
from kafka_direct.config.defaults import OPTION_DEFAULTS, SOURCE_OWNED_KAFKA_KEYS, parse_duration_ms
from kafka_direct.config.kafka import (
    REDACTED,
    KafkaConfig,
    Subscription,
    is_secret,
    refuse_jvm_settings,
    refuse_near_misses,
)
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError
from kafka_direct.offsets import (
    EARLIEST,
    OffsetRange,
    PartitionOffsets,
    parse_assign,
    parse_offsets_option,
    parse_ranges_option,
    parse_timestamps_option,
)

__all__ = ["OffsetBound", "SourceOptions", "parse_source_options"]


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
class SourceOptions:
    """Every source option, validated. Built by :func:`parse_source_options`."""

    strategy: Subscription
    kafka: KafkaConfig
    starting: OffsetBound
    ending: OffsetBound | None
    timestamp_strategy: Literal["error", "latest"]
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    #: 'fetchOffset.unavailableTimeout': how long a stream waits for offsets that do not come.
    unavailable_timeout_ms: int
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    max_offsets_per_partition_per_trigger: int | None
    min_partitions: int | None
    max_records_per_partition: int | None
    group_id_prefix: str
    user_group_id: str | None
    #: The consumer group this query reports to: 'commitOffsetsToGroup', else kafka.group.id.
    group: str | None
    #: Whether finished micro-batches are committed to ``group`` ('commitOffsets').
    commit_offsets: bool
    #: ``startingOffsets=committed``: earliest | latest | error for partitions with no commit.
    committed_fallback: Literal["earliest", "latest", "error"]
    consumer_cache_enabled: bool
    consumer_cache_capacity: int
    consumer_cache_timeout_ms: int
    arrow_batch_size: int
    #: 'fastPath.enabled': executors read through the C fast path when it is available.
    fast_path: bool
    streaming: bool
    #: 'offsetRanges': exactly these ranges (batch reads only); then nothing is planned.
    ranges: tuple[OffsetRange, ...] | None = None
    #: 'pushdown.enabled': batch reads narrow their ranges by the query's filters.
    pushdown: bool = True
    #: 'maxRecordsPerTask': small ranges are packed into one task up to this many records.
    max_records_per_task: int = 1_000_000

    @property
    def commit_group(self) -> str | None:
        """The group finished micro-batches are committed to, or None for no commits."""
        return self.group if self.commit_offsets else None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    @property
    def isolation_level(self) -> str:
        return self.kafka.get("isolation.level", OPTION_DEFAULTS["kafka.isolation.level"])

    def executor_settings(self) -> ExecutorSettings:
        """What read tasks need, with the executors' consumer config (see config.clients)."""
        group = executor_group_id(
            self.user_group_id,
            self.group_id_prefix,
            self.bootstrap_servers,
            self.strategy.describe(),
        )
        config = executor_consumer_config(
            self.kafka, group_id=group, isolation_level=self.isolation_level
        )
        return ExecutorSettings(
            consumer_config=KafkaConfig(config),
            poll_timeout_ms=self.poll_timeout_ms,
            fail_on_data_loss=self.fail_on_data_loss,
            batch_size=self.arrow_batch_size,
            include_headers=self.include_headers,
            cache_enabled=self.consumer_cache_enabled,
            cache_capacity=self.consumer_cache_capacity,
            cache_timeout_s=max(self.consumer_cache_timeout_ms, 1) / 1000.0,
            fast_path=self.fast_path,
        )


class _Options:
    """Lower-cased option lookup that remembers what was read, to flag unknown keys."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}

    def get(self, name: str) -> str | None:
        value = self.raw.get(name.lower())
        return value.strip() if value is not None else None

    def text(self, name: str) -> str:
        value = self.get(name)
        return value if value is not None else OPTION_DEFAULTS[name]

    def boolean(self, name: str) -> bool:
        value = self.text(name).lower()
        if value not in ("true", "false"):
            raise ConfigurationError(name, self.get(name), "'true' or 'false'")
        return value == "true"

    def integer(self, name: str, *, minimum: int, default: str | None = None) -> int:
        raw = self.get(name)
        if raw is None:
            raw = default if default is not None else OPTION_DEFAULTS[name]
        try:
            value = int(raw)
        except ValueError:
            raise ConfigurationError(name, raw, f"an integer >= {minimum}") from None
        if value < minimum:
            raise ConfigurationError(name, raw, f"an integer >= {minimum}")
        return value

    def duration(self, name: str) -> int:
        raw = self.text(name)
        try:
            return parse_duration_ms(raw)
        except ValueError:
            raise ConfigurationError(
                name, raw, "a duration such as '15m', '30s' or '500ms'"
            ) from None

    def optional_int(self, name: str, *, minimum: int) -> int | None:
        return None if self.get(name) is None else self.integer(name, minimum=minimum)


def parse_source_options(raw: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate every option and combination; raise :class:`ConfigurationError` on the first.

    ``streaming=None`` checks what does not depend on the mode (used when Spark asks for the
    schema, before it says whether the read is a batch or a stream).
    """
    opts = _Options(raw)
    refuse_near_misses(opts.raw, [*OPTION_DEFAULTS, "path"], "source")
    kafka = _kafka_params(opts)
    ranges = _ranges(opts, streaming)
    strategy = _strategy(opts) if ranges is None else _assigned(ranges)
    starting = _starting(opts, streaming)
    ending = _ending(opts, streaming)
    timestamp_strategy_raw = opts.text("startingOffsetsByTimestampStrategy")
    timestamp_strategy = timestamp_strategy_raw.lower()
    if timestamp_strategy not in ("error", "latest"):
        raise ConfigurationError(
            "startingOffsetsByTimestampStrategy", timestamp_strategy_raw, "'error' or 'latest'"
        )
    _check_offsets_match_assign(strategy, starting)
    if ending is not None:
        _check_offsets_match_assign(strategy, ending)
    min_trigger = opts.optional_int("minOffsetsPerTrigger", minimum=1)
    max_trigger = opts.optional_int("maxOffsetsPerTrigger", minimum=1)
    if min_trigger is not None and max_trigger is not None and min_trigger > max_trigger:
        raise ConfigurationError(
            "minOffsetsPerTrigger",
            str(min_trigger),
            f"a value <= maxOffsetsPerTrigger ({max_trigger})",
            "Lower minOffsetsPerTrigger or raise maxOffsetsPerTrigger.",
        )
    max_trigger_delay_ms = opts.duration("maxTriggerDelay")
    prefix = opts.text("groupIdPrefix")
    if not prefix:
        raise ConfigurationError("groupIdPrefix", prefix, "a non-empty string")
    group = _group(opts, kafka)
    fallback = opts.text("committedOffsetsFallback").lower()
    if fallback not in ("earliest", "latest", "error"):
        raise ConfigurationError(
            "committedOffsetsFallback",
            opts.get("committedOffsetsFallback"),
            "'earliest', 'latest' or 'error'",
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
        timestamp_strategy="error" if timestamp_strategy == "error" else "latest",
        fail_on_data_loss=opts.boolean("failOnDataLoss"),
        include_headers=opts.boolean("includeHeaders"),
        poll_timeout_ms=opts.integer("kafkaConsumer.pollTimeoutMs", minimum=1),
        fetch_retries=opts.integer("fetchOffset.numRetries", minimum=0),
        fetch_retry_interval_ms=opts.integer("fetchOffset.retryIntervalMs", minimum=0),
        unavailable_timeout_ms=opts.duration("fetchOffset.unavailableTimeout"),
        max_offsets_per_trigger=max_trigger,
        min_offsets_per_trigger=min_trigger,
        max_trigger_delay_ms=max_trigger_delay_ms,
        max_offsets_per_partition_per_trigger=opts.optional_int(
            "maxOffsetsPerPartitionPerTrigger", minimum=1
        ),
        min_partitions=opts.optional_int("minPartitions", minimum=1),
        max_records_per_partition=opts.optional_int("maxRecordsPerPartition", minimum=1),
        group_id_prefix=prefix,
        user_group_id=kafka.get("group.id"),
        group=group,
        commit_offsets=opts.boolean("commitOffsets"),
        committed_fallback="earliest"
        if fallback == "earliest"
        else "latest"
        if fallback == "latest"
        else "error",
        consumer_cache_enabled=opts.boolean("consumerCache.enabled"),
        consumer_cache_capacity=opts.integer("consumerCache.capacity", minimum=1),
        consumer_cache_timeout_ms=opts.integer("consumerCache.timeoutMs", minimum=0),
        arrow_batch_size=_arrow_batch_size(opts),
        fast_path=opts.boolean("fastPath.enabled"),
        streaming=bool(streaming),
        ranges=ranges,
        pushdown=opts.boolean("pushdown.enabled"),
        max_records_per_task=opts.integer("maxRecordsPerTask", minimum=1),
    )


def _group(opts: _Options, kafka: KafkaConfig) -> str | None:
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


def _arrow_batch_size(opts: _Options) -> int:
    size = opts.integer("arrowBatchSize", minimum=1)
    # librdkafka's consume() takes at most 1,000,000 messages per call, and one batch is read
    # with one call at most; a bigger value would fail every task with librdkafka's own error.
    if size > 1_000_000:
        raise ConfigurationError(
            "arrowBatchSize", str(size), "an integer from 1 to 1000000", "The default is 20000."
        )
    return size


def _kafka_params(opts: _Options) -> KafkaConfig:
    params: dict[str, str] = {}
    for key, value in opts.raw.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in SOURCE_OWNED_KAFKA_KEYS:
            shown = REDACTED if is_secret(name) else value
            raise UnsupportedKafkaOptionError(key, shown, SOURCE_OWNED_KAFKA_KEYS[name])
        # Passed through untouched: a secret may legitimately start or end with a space.
        params[name] = opts.raw[key]
    refuse_jvm_settings(params)
    if not params.get("bootstrap.servers", "").strip():
        raise ConfigurationError(
            "kafka.bootstrap.servers",
            params.get("bootstrap.servers"),
            "a comma-separated list of host:port",
            "Set .option('kafka.bootstrap.servers', 'host1:9092,host2:9092').",
        )
    level = params.get("isolation.level")
    if level is not None and level not in ("read_committed", "read_uncommitted"):
        raise ConfigurationError(
            "kafka.isolation.level", level, "'read_committed' or 'read_uncommitted'"
        )
    return KafkaConfig(params)


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


def _ranges(opts: _Options, streaming: bool | None) -> tuple[OffsetRange, ...] | None:
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


def _strategy(opts: _Options) -> Subscription:
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


def _starting(opts: _Options, streaming: bool | None) -> OffsetBound:
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


def _ending(opts: _Options, streaming: bool | None) -> OffsetBound | None:
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


def _timestamp_spec(opts: _Options, global_name: str, by_partition_name: str) -> OffsetBound | None:
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
