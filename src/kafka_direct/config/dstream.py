"""The DStream-style API's configuration, checked before Spark is touched: ``kafkaParams``
(judged by :func:`kafka_direct.config.reader.kafka_params`, as the source's ``kafka.*`` options
are), ``createDirectStream``'s and ``createRDD``'s arguments with the batch-source options a
stream passes on, and ``createStream``'s arguments. Pure: plain library (no Spark, no Kafka
client), used by the Spark driver. The clients' configs are built in
:mod:`~kafka_direct.config.clients`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kafka_direct.config.clients import receiver_consumer_config
from kafka_direct.config.defaults import SOURCE_OWNED_KAFKA_KEYS
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.reader import kafka_params
from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = [
    "AutoOffsetReset",
    "Backpressure",
    "DirectStreamConfig",
    "RateFunction",
    "ReceiverStreamConfig",
    "direct_stream_config",
    "non_negative",
    "positive",
    "rate_function",
    "rdd_ranges",
    "receiver_stream_config",
    "require_instance",
    "stream_source_options",
    "validate_params",
]

#: Records per second for a partition (Spark's ``PerPartitionConfig.maxRatePerPartition``).
RateFunction = Callable[[TopicPartition], float]

AutoOffsetReset = Literal["earliest", "latest", "none"]

#: librdkafka's spellings and the Java client's, mapped to the Java meaning.
_RESET_VALUES: dict[str, AutoOffsetReset] = {
    "earliest": "earliest",
    "smallest": "earliest",
    "beginning": "earliest",
    "latest": "latest",
    "largest": "latest",
    "end": "latest",
    "none": "none",
    "error": "none",
}

#: Keys the stream handles itself (the rest of SOURCE_OWNED_KAFKA_KEYS is refused as in the source).
_STREAM_KEYS = {"auto.offset.reset", "enable.auto.commit", "group.id"}
_OWNED = {k: v for k, v in SOURCE_OWNED_KAFKA_KEYS.items() if k not in _STREAM_KEYS}


def validate_params(
    params: Mapping[str, Any], *, require_group: bool = True
) -> tuple[KafkaConfig, str, AutoOffsetReset]:
    """Check ``kafkaParams``; return the client settings, the group id and the reset policy.

    ``require_group=False`` is for one-off reads (``createRDD``), which commit nothing.
    """
    if not isinstance(params, Mapping):
        raise ConfigurationError("kafkaParams", type(params).__name__, "a dict of librdkafka keys")
    config = {str(k): _param_text(v) for k, v in params.items() if v is not None}
    kafka_params(
        config,
        owned=_OWNED,
        owner="stream",
        prefix="",
        bootstrap_fix="Add 'bootstrap.servers': 'host1:9092,host2:9092' to kafkaParams.",
    )
    group = config.get("group.id", "").strip()
    if not group and require_group:
        raise ConfigurationError(
            "group.id",
            config.get("group.id"),
            "a consumer group id",
            "The stream commits the offsets you pass to commitAsync for this group (or to your "
            "offsetStore under it); add 'group.id': 'my-app' to kafkaParams.",
        )
    if config.get("enable.auto.commit", "false").strip().lower() != "false":
        raise ConfigurationError(
            "enable.auto.commit",
            config["enable.auto.commit"],
            "'false' or no value",
            "Auto-commit would commit offsets before your function has processed them, which "
            "loses data after a failure. The stream commits only what you pass to "
            "stream.commitAsync(offsetRanges), after your function returns. Remove the key.",
        )
    raw_reset = config.get("auto.offset.reset", "latest").strip().lower()
    if raw_reset not in _RESET_VALUES:
        raise ConfigurationError(
            "auto.offset.reset", config["auto.offset.reset"], "'earliest', 'latest' or 'none'"
        )
    kafka = KafkaConfig({k: v for k, v in config.items() if k not in _STREAM_KEYS})
    return kafka, group, _RESET_VALUES[raw_reset]


def _param_text(value: object) -> str:
    # Scala's kafkaParams are Map[String, Object]: accept ints and booleans the same way.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: Batch-source options a direct stream may pass on; the others are the stream's own business.
_PASS_THROUGH = {
    name.lower(): name
    for name in (
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "fetchOffset.unavailableTimeout",
        "minPartitions",
        "maxRecordsPerPartition",
        "maxRecordsPerTask",
        "groupIdPrefix",
        "consumerCache.enabled",
        "consumerCache.capacity",
        "consumerCache.timeoutMs",
        "arrowBatchSize",
        "fastPath.enabled",
        "pushdown.enabled",
    )
}


def stream_source_options(raw: Mapping[str, str] | None) -> SourceOptions:
    """Validate the batch-source options a stream passes on (refusing the stream's own)."""
    options = {str(k): str(v) for k, v in dict(raw or {}).items()}
    for key in options:
        if key.lower() not in _PASS_THROUGH:
            raise ConfigurationError(
                f"sourceOptions['{key}']",
                options[key],
                "one of " + ", ".join(sorted(_PASS_THROUGH.values())),
                "Kafka client settings belong in kafkaParams; offsets, rates and failOnDataLoss "
                "are arguments of createDirectStream.",
            )
    probe = {"kafka.bootstrap.servers": "probe:9092", "assign": '{"probe": [0]}', **options}
    return parse_source_options(probe, streaming=False)


def rate_function(value: float | Mapping[Any, float] | RateFunction | None) -> RateFunction:
    if value is None:
        return lambda _tp: 0.0
    if callable(value):
        fn = value

        def checked(tp: TopicPartition) -> float:
            rate = fn(tp)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or math.isnan(rate):
                raise ConfigurationError("maxRatePerPartition", rate, f"a number for {tp}")
            return float(rate)

        return checked
    if isinstance(value, Mapping):
        rates: dict[TopicPartition, float] = {}
        for key, rate in value.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ConfigurationError("maxRatePerPartition", key, "TopicPartition keys")
            rates[TopicPartition(*key)] = non_negative("maxRatePerPartition", rate)
        return lambda tp: rates.get(tp, 0.0)
    rate = non_negative("maxRatePerPartition", value)
    return lambda _tp: rate


def positive(name: str, value: object, unit: str) -> float:
    number = non_negative(name, value)
    if number <= 0:
        raise ConfigurationError(name, value, f"a number > 0 ({unit})")
    return number


def non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(name, value, "a number >= 0")
    if math.isinf(value):
        raise ConfigurationError(name, value, "a finite number")
    return float(value)


# -- the direct stream (createDirectStream, createRDD) ------------------------------------------


@dataclass(frozen=True)
class Backpressure:
    """The PID rate estimator's terms (``spark.streaming.backpressure.pid.*``), checked."""

    proportional: float
    integral: float
    derivative: float
    min_rate: float


@dataclass(frozen=True)
class DirectStreamConfig:
    """``createDirectStream``'s arguments, checked: the stream is assembled from this."""

    batch_interval_s: float
    max_rate: RateFunction
    min_rate: int
    #: None: no backpressure.
    backpressure: Backpressure | None
    initial_rate: float
    fail_on_data_loss: bool
    failure_policy: Literal["stop", "retry"]
    max_retries: int
    retry_interval_s: float
    retained_batches: int
    #: The batch-source options passed on, validated (and as given, for the batch reads).
    source: SourceOptions
    source_options: Mapping[str, str]

    @property
    def batch_options(self) -> dict[str, str]:
        """The options of every batch read: those passed on, and ``failOnDataLoss``."""
        return {**self.source_options, "failOnDataLoss": str(self.fail_on_data_loss).lower()}


def require_instance(name: str, value: object, cls: type, expected: str) -> None:
    """Refuse an argument that is not a ``cls`` (the API's own objects: strategies, stores)."""
    if not isinstance(value, cls):
        raise ConfigurationError(name, value, expected)


def direct_stream_config(
    *,
    batch_interval: object,
    max_rate_per_partition: float | Mapping[Any, float] | RateFunction | None,
    min_rate_per_partition: object,
    backpressure: bool,
    initial_rate: object,
    pid_proportional: object,
    pid_integral: object,
    pid_derivative: object,
    pid_min_rate: object,
    fail_on_data_loss: bool,
    failure_policy: object,
    max_retries: object,
    retry_interval: object,
    source_options: Mapping[str, str] | None,
    retained_batches: object,
) -> DirectStreamConfig:
    """Check ``createDirectStream``'s arguments; each error names the argument and the fix."""
    interval = positive("batchInterval", batch_interval, "seconds")
    if not isinstance(min_rate_per_partition, int) or min_rate_per_partition < 1:
        raise ConfigurationError("minRatePerPartition", min_rate_per_partition, "an integer >= 1")
    initial = non_negative("initialRate", initial_rate)
    if initial > 0 and not backpressure:
        raise ConfigurationError(
            "initialRate",
            initial_rate,
            "no initial rate without backpressure",
            "initialRate is the rate before backpressure has an estimate (as "
            "spark.streaming.backpressure.initialRate); pass backpressure=True, or use "
            "maxRatePerPartition for a fixed limit.",
        )
    pid = None
    if backpressure:
        pid = Backpressure(
            non_negative("pidProportional", pid_proportional),
            non_negative("pidIntegral", pid_integral),
            non_negative("pidDerivative", pid_derivative),
            positive("pidMinRate", pid_min_rate, "records per second"),
        )
    if failure_policy not in ("stop", "retry"):
        raise ConfigurationError("failurePolicy", failure_policy, "'stop' or 'retry'")
    retries = _count("maxRetries", max_retries, minimum=0)
    retry_s = interval if retry_interval is None else non_negative("retryInterval", retry_interval)
    retained = _count("retainedBatches", retained_batches, minimum=1)
    return DirectStreamConfig(
        batch_interval_s=interval,
        max_rate=rate_function(max_rate_per_partition),
        min_rate=min_rate_per_partition,
        backpressure=pid,
        initial_rate=initial,
        fail_on_data_loss=fail_on_data_loss,
        failure_policy="stop" if failure_policy == "stop" else "retry",
        max_retries=retries,
        retry_interval_s=retry_s,
        retained_batches=retained,
        source=stream_source_options(source_options),
        source_options=dict(source_options or {}),
    )


def rdd_ranges(offset_ranges: Iterable[object]) -> list[OffsetRange]:
    """``createRDD``'s ranges: ``OffsetRange`` objects only."""
    ranges = list(offset_ranges)
    bad = [r for r in ranges if not isinstance(r, OffsetRange)]
    if bad:
        raise ConfigurationError("offsetRanges", bad[0], "OffsetRange objects")
    return [r for r in ranges if isinstance(r, OffsetRange)]


def _count(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(name, value, f"an integer >= {minimum}")
    return value


# -- the receiver stream (createStream) ------------------------------------------------------

#: Spark's ``spark.streaming.blockInterval``: how often a receiver closes a block.
DEFAULT_BLOCK_INTERVAL_S = 0.2

#: librdkafka's spelling of the reset policy the receivers' consumers get.
_LIBRDKAFKA_RESET = {"earliest": "earliest", "latest": "latest", "none": "error"}


@dataclass(frozen=True)
class ReceiverStreamConfig:
    """``createStream``'s arguments, checked. Small and picklable: receivers get a copy."""

    kafka: KafkaConfig  # the user's client settings, without the keys the receivers own
    group: str
    auto_offset_reset: AutoOffsetReset
    topics: tuple[str, ...]
    batch_interval_s: float
    num_receivers: int
    write_ahead_log: bool
    wal_dir: str | None  # None: a scratch directory made at start (only without the WAL)
    max_rate_per_receiver: float  # records/s per receiver; 0 = no limit
    max_pending_blocks: int
    block_interval_s: float
    include_headers: bool
    retained_batches: int

    def consumer_config(self, receiver_id: int) -> dict[str, str]:
        """librdkafka consumer config of receiver ``receiver_id``: a member of ``group``."""
        return receiver_consumer_config(
            self.kafka,
            group=self.group,
            auto_offset_reset=_LIBRDKAFKA_RESET[self.auto_offset_reset],
            receiver_id=receiver_id,
        )


def receiver_stream_config(
    params: Mapping[str, Any],
    topics: object,
    *,
    batch_interval: object,
    num_receivers: object,
    write_ahead_log: object,
    wal_dir: object,
    max_rate_per_receiver: object,
    max_pending_blocks: object,
    block_interval: object,
    include_headers: object,
    retained_batches: object,
) -> ReceiverStreamConfig:
    """Check ``createStream``'s arguments; each error names the argument and how to fix it."""
    if isinstance(params, Mapping):
        _check_receiver_params(params)
    kafka, group, reset = validate_params(params)
    interval = positive("batchInterval", batch_interval, "seconds")
    block = positive("blockInterval", block_interval, "seconds")
    if block > interval:
        raise ConfigurationError(
            "blockInterval",
            block_interval,
            f"at most batchInterval ({interval:g} s)",
            "A batch takes the blocks closed so far; a block interval longer than the batch "
            "interval leaves batches empty. Lower blockInterval (default 0.2 s).",
        )
    receivers = _positive_int("numReceivers", num_receivers)
    for name, flag in (("writeAheadLog", write_ahead_log), ("includeHeaders", include_headers)):
        if not isinstance(flag, bool):
            raise ConfigurationError(name, flag, "True or False")
    rate = (
        0.0
        if max_rate_per_receiver is None
        else non_negative("maxRatePerReceiver", max_rate_per_receiver)
    )
    if max_pending_blocks is None:
        # About four batches' worth of blocks: a stream that keeps up never pauses, one that
        # falls behind pauses before its backlog (disk, and the first batch after) grows more.
        pending = max(16, 4 * receivers * math.ceil(interval / block))
    else:
        pending = _positive_int("maxPendingBlocks", max_pending_blocks)
    return ReceiverStreamConfig(
        kafka=kafka,
        group=group,
        auto_offset_reset=reset,
        topics=_topics(topics),
        batch_interval_s=interval,
        num_receivers=receivers,
        write_ahead_log=bool(write_ahead_log),
        wal_dir=_wal_dir(wal_dir, bool(write_ahead_log)),
        max_rate_per_receiver=rate,
        max_pending_blocks=pending,
        block_interval_s=block,
        include_headers=bool(include_headers),
        retained_batches=_positive_int("retainedBatches", retained_batches),
    )


def _check_receiver_params(params: Mapping[str, Any]) -> None:
    # Said here in the receivers' terms; validate_params says it in the direct stream's.
    group = params.get("group.id")
    if group is None or not str(group).strip():
        raise ConfigurationError(
            "group.id",
            group,
            "a consumer group id",
            "Receivers are members of this consumer group: Kafka assigns them partitions and "
            "they commit to it. Add 'group.id': 'my-app' to kafkaParams.",
        )
    auto = params.get("enable.auto.commit")
    if auto is not None and _param_text(auto).strip().lower() != "false":
        raise ConfigurationError(
            "enable.auto.commit",
            auto,
            "'false' or no value",
            "Auto-commit commits offsets before their records are in the write-ahead log, so a "
            "crash loses them. Receivers commit each block's offsets themselves, after the block "
            "is logged. Remove the key.",
        )


def _topics(topics: object) -> tuple[str, ...]:
    expected = "a list of topic names (or Spark's {topic: numThreads} dict)"
    if isinstance(topics, str | bytes) or not isinstance(topics, Mapping | list | tuple | set):
        raise ConfigurationError("topics", topics, expected, "For one topic pass ['name'].")
    if isinstance(topics, Mapping):
        for name, threads in topics.items():
            _positive_int(f"topics[{name!r}]", threads)
    names = [str(t).strip() if isinstance(t, str) else t for t in topics]
    bad = [t for t in names if not isinstance(t, str) or not t]
    if bad or not names:
        raise ConfigurationError("topics", topics, expected)
    return tuple(dict.fromkeys(n for n in names if isinstance(n, str)))


def _wal_dir(value: object, durable: bool) -> str | None:
    if value is None:
        if durable:
            raise ConfigurationError(
                "walDir",
                None,
                "a directory path every node of the cluster shares",
                "The write-ahead log holds received blocks until a batch has processed them; "
                "pass walDir='/shared/wal/my-app' (NFS or another mount every node sees), or "
                "writeAheadLog=False to accept losing unprocessed records after a crash.",
            )
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigurationError("walDir", value, "a directory path (str or os.PathLike)")
    path = os.fspath(value)
    if not isinstance(path, str) or "://" in path:
        raise ConfigurationError(
            "walDir",
            value,
            "a POSIX path mounted on every node",
            "hdfs://, s3:// and other URLs are not supported: receivers fsync files, so mount "
            "the storage (NFS, a FUSE mount) and pass the mount's path.",
        )
    if not os.path.isabs(path):
        raise ConfigurationError(
            "walDir",
            value,
            "an absolute path",
            "Receivers and batch tasks run in other processes, in other directories; pass "
            f"os.path.abspath({path!r}).",
        )
    return os.path.normpath(path)


def _positive_int(name: str, value: object) -> int:
    return _count(name, value, minimum=1)
