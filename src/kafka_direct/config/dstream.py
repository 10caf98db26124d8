"""The DStream-style API's configuration, checked before Spark is touched: ``kafkaParams``
(judged by :func:`kafka_direct.config.reader.kafka_params`, as the source's ``kafka.*`` options
are), and ``createDirectStream``'s and ``createRDD``'s arguments with the batch-source options
a stream passes on (``createStream``'s are in :mod:`~kafka_direct.config.receiver`). Pure: plain
library (no Spark, no Kafka client), used by the Spark driver. The clients' configs are built in
:mod:`~kafka_direct.config.clients`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kafka_direct.config.defaults import SOURCE_OWNED_KAFKA_KEYS
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.oauth import OPTION as OAUTH_OPTION
from kafka_direct.config.reader import kafka_params
from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.redaction import shown

__all__ = [
    "AutoOffsetReset",
    "Backpressure",
    "DirectStreamConfig",
    "FailurePolicy",
    "RateFunction",
    "direct_stream_config",
    "integer_at_least",
    "non_negative",
    "param_text",
    "positive",
    "rate_function",
    "rdd_ranges",
    "require_instance",
    "stream_source_options",
    "validate_params",
]

#: Records per second for a partition (Spark's ``PerPartitionConfig.maxRatePerPartition``).
RateFunction = Callable[[TopicPartition], float]

AutoOffsetReset = Literal["earliest", "latest", "none"]

#: What the direct stream does when a batch fails (docs/dstream.md).
FailurePolicy = Literal["stop", "retry"]

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
    config = {str(k): param_text(v) for k, v in params.items() if v is not None}
    # Not a librdkafka key: the token function (config.oauth), given as the source's option.
    provider = config.pop(OAUTH_OPTION, None)
    # The client settings as librdkafka takes them: JAAS, stores and the token function
    # translated (config.security, config.oauth), for the stream's own clients and its batches.
    config = {
        **kafka_params(
            config,
            owned=_OWNED,
            owner="stream",
            prefix="",
            bootstrap_fix="Add 'bootstrap.servers': 'host1:9092,host2:9092' to kafkaParams.",
            oauth_provider=provider,
        ),
        **{k: config[k] for k in _STREAM_KEYS if k in config},
    }
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


def param_text(value: object) -> str:
    """A ``kafkaParams`` value as librdkafka's text."""
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
        "maxBatchBytes",
        "taskMemoryBudget",
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
                # Judged by the key the user wrote: the wrapped name no longer looks like a
                # Kafka setting, nor like a secret one.
                shown(key, options[key]),
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
    failure_policy: FailurePolicy
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
    retries = integer_at_least("maxRetries", max_retries, minimum=0)
    retry_s = interval if retry_interval is None else non_negative("retryInterval", retry_interval)
    retained = integer_at_least("retainedBatches", retained_batches, minimum=1)
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


def integer_at_least(name: str, value: object, *, minimum: int) -> int:
    """An integer argument (never a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(name, value, f"an integer >= {minimum}")
    return value
