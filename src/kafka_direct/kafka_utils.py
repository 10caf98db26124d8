"""``KafkaUtils``: the seeds' entry points, ``createDirectStream`` and ``createRDD``, over the
``kafka_direct`` batch source. Runs in the Spark driver (the user's process).

Every batch DataFrame is an ordinary ``spark.read.format("kafka_direct")`` read with ``assign``
and per-partition ``startingOffsets``/``endingOffsets`` JSON: exactly the planned ranges, read by
the same executor code as the structured source. A batch with no new records is an empty
DataFrame with the source's schema, built without touching Kafka. Without an ``offsetStore``,
``commitAsync`` commits to the Kafka consumer group (``__consumer_offsets``) through the admin
client, where ``kafka-consumer-groups --describe`` and lag monitors see it.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct.direct_planner import DirectStreamPlanner
from kafka_direct.direct_stream import DirectKafkaStream, FailurePolicy, JobControl
from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_store import OffsetStore
from kafka_direct.offsets import OffsetRange, TopicPartition, offsets_to_json
from kafka_direct.options import SourceOptions, parse_source_options
from kafka_direct.rate_estimator import PIDRateEstimator, RateFunction
from kafka_direct.stores.kafka_store import KafkaGroupStore
from kafka_direct.strategies import (
    ConsumerStrategy,
    LocationStrategy,
    validate_params,
    warn_if_ignored,
)

__all__ = ["KafkaUtils", "batch_frame"]

log = logging.getLogger(__name__)

#: Batch-source options a direct stream may pass on; the others are the stream's own business.
_PASS_THROUGH = {
    name.lower(): name
    for name in (
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "minPartitions",
        "maxRecordsPerPartition",
        "groupIdPrefix",
        "consumerCache.enabled",
        "consumerCache.capacity",
        "consumerCache.timeoutMs",
        "arrowBatchSize",
    )
}


class KafkaUtils:
    """Spark's ``KafkaUtils`` for the direct approach, on ``kafka_direct``."""

    @staticmethod
    def createDirectStream(
        spark: Any,
        locationStrategy: LocationStrategy,
        consumerStrategy: ConsumerStrategy,
        *,
        batchInterval: float,
        maxRatePerPartition: float | Mapping[Any, float] | RateFunction | None = None,
        minRatePerPartition: int = 1,
        backpressure: bool = False,
        initialRate: float = 0,
        pidProportional: float = 1.0,
        pidIntegral: float = 0.2,
        pidDerivative: float = 0.0,
        pidMinRate: float = 100.0,
        offsetStore: OffsetStore | None = None,
        failOnDataLoss: bool = True,
        failurePolicy: FailurePolicy = "stop",
        maxRetries: int = 3,
        retryInterval: float | None = None,
        sourceOptions: Mapping[str, str] | None = None,
        retainedBatches: int = 1000,
    ) -> DirectKafkaStream:
        """A stream of batch DataFrames over ``consumerStrategy``, every ``batchInterval`` s.

        Rates are records per second per partition, as ``spark.streaming.kafka.*``:
        ``maxRatePerPartition`` (a number, a ``{TopicPartition: rate}`` mapping or a function of
        the partition; 0 or missing = no limit), ``minRatePerPartition``. ``backpressure=True``
        adds the PID estimator (``spark.streaming.backpressure.*``), with ``initialRate`` until
        it has an estimate. ``offsetStore`` receives ``commitAsync``'s offsets instead of the
        Kafka group. See the README for ``failurePolicy`` and the lifecycle.
        """
        if not isinstance(locationStrategy, LocationStrategy):
            raise ConfigurationError(
                "locationStrategy", locationStrategy, "LocationStrategies.PreferConsistent()"
            )
        if not isinstance(consumerStrategy, ConsumerStrategy):
            raise ConfigurationError(
                "consumerStrategy", consumerStrategy, "a ConsumerStrategies.Subscribe/Assign(...)"
            )
        interval = _positive("batchInterval", batchInterval, "seconds")
        if not isinstance(minRatePerPartition, int) or minRatePerPartition < 1:
            raise ConfigurationError("minRatePerPartition", minRatePerPartition, "an integer >= 1")
        initial = _non_negative("initialRate", initialRate)
        if initial > 0 and not backpressure:
            raise ConfigurationError(
                "initialRate",
                initialRate,
                "no initial rate without backpressure",
                "initialRate is the rate before backpressure has an estimate (as "
                "spark.streaming.backpressure.initialRate); pass backpressure=True, or use "
                "maxRatePerPartition for a fixed limit.",
            )
        estimator = None
        if backpressure:
            estimator = PIDRateEstimator(
                max(1, round(interval * 1000)),
                _non_negative("pidProportional", pidProportional),
                _non_negative("pidIntegral", pidIntegral),
                _non_negative("pidDerivative", pidDerivative),
                _positive("pidMinRate", pidMinRate, "records per second"),
            )
        if failurePolicy not in ("stop", "retry"):
            raise ConfigurationError("failurePolicy", failurePolicy, "'stop' or 'retry'")
        if isinstance(maxRetries, bool) or not isinstance(maxRetries, int) or maxRetries < 0:
            raise ConfigurationError("maxRetries", maxRetries, "an integer >= 0")
        retry_s = (
            interval if retryInterval is None else _non_negative("retryInterval", retryInterval)
        )
        if offsetStore is not None and not isinstance(offsetStore, OffsetStore):
            raise ConfigurationError("offsetStore", offsetStore, "an OffsetStore instance")
        if not isinstance(retainedBatches, int) or retainedBatches < 1:
            raise ConfigurationError("retainedBatches", retainedBatches, "an integer >= 1")
        opts = _source_options(sourceOptions)
        warn_if_ignored(locationStrategy)
        _register(spark)

        from kafka_direct.offset_reader import AdminOffsetReader  # imports the Kafka client

        store: OffsetStore = offsetStore or KafkaGroupStore(consumerStrategy.kafka)
        group = consumerStrategy.group_id
        reader = AdminOffsetReader(
            consumerStrategy.kafka,
            isolation_level=consumerStrategy.isolation_level,
            num_retries=opts.fetch_retries,
            retry_interval_ms=opts.fetch_retry_interval_ms,
        )
        planner = DirectStreamPlanner(
            consumerStrategy,
            reader,
            lambda tps: store.load(group, tps),
            batch_interval_s=interval,
            max_rate=_rate_function(maxRatePerPartition),
            min_rate=lambda _tp: minRatePerPartition,
            fail_on_data_loss=failOnDataLoss,
        )
        kafka = consumerStrategy.kafka.merged({"group.id": group})
        options = {**(sourceOptions or {}), "failOnDataLoss": str(failOnDataLoss).lower()}
        return DirectKafkaStream(
            consumerStrategy,
            planner,
            lambda ranges: batch_frame(spark, kafka, ranges, options),
            batch_interval_s=interval,
            offset_store=store,
            owns_store=offsetStore is None,
            estimator=estimator,
            initial_rate=initial,
            failure_policy=failurePolicy,
            max_retries=maxRetries,
            retry_interval_s=retry_s,
            retained_batches=retainedBatches,
            jobs=_job_control(spark, group),
        )

    @staticmethod
    def createRDD(
        spark: Any,
        kafkaParams: Mapping[str, Any],
        offsetRanges: Iterable[OffsetRange],
        locationStrategy: LocationStrategy | None = None,
        sourceOptions: Mapping[str, str] | None = None,
    ) -> Any:
        """A DataFrame over exactly ``offsetRanges``: the seeds' ``KafkaRDD``, for one-off reads."""
        kafka, group, _reset = validate_params(kafkaParams, require_group=False)
        ranges = list(offsetRanges)
        bad = [r for r in ranges if not isinstance(r, OffsetRange)]
        if bad:
            raise ConfigurationError("offsetRanges", bad[0], "OffsetRange objects")
        _source_options(sourceOptions)
        if locationStrategy is not None:
            warn_if_ignored(locationStrategy)
        _register(spark)
        if group:
            kafka = kafka.merged({"group.id": group})
        return batch_frame(spark, kafka, ranges, dict(sourceOptions or {}))


def batch_frame(
    spark: Any, kafka: Mapping[str, str], ranges: Sequence[OffsetRange], options: Mapping[str, str]
) -> Any:
    """The DataFrame of ``ranges`` through the batch source; several ranges of one partition
    become a union of reads (the source takes one range per partition)."""
    layers: list[dict[TopicPartition, OffsetRange]] = []
    for r in ranges:
        if r.count() == 0:
            continue
        layer = next((x for x in layers if r.topic_partition not in x), None)
        if layer is None:
            layer = {}
            layers.append(layer)
        layer[r.topic_partition] = r
    if not layers:
        from kafka_direct.rows import schema_ddl

        headers = any(
            k.lower() == "includeheaders" and v.lower() == "true" for k, v in options.items()
        )
        return spark.createDataFrame([], schema_ddl(headers))
    frames = [_read_ranges(spark, kafka, layer, options) for layer in layers]
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def _read_ranges(
    spark: Any,
    kafka: Mapping[str, str],
    layer: Mapping[TopicPartition, OffsetRange],
    options: Mapping[str, str],
) -> Any:
    assign: dict[str, list[int]] = {}
    for tp in sorted(layer):
        assign.setdefault(tp.topic, []).append(tp.partition)
    reader = spark.read.format("kafka_direct")
    for key, value in kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    for key, value in options.items():
        reader = reader.option(key, value)
    starting = offsets_to_json({tp: r.from_offset for tp, r in layer.items()})
    ending = offsets_to_json({tp: r.until_offset for tp, r in layer.items()})
    return (
        reader.option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load()
    )


def _register(spark: Any) -> None:
    if not hasattr(spark, "read"):
        raise ConfigurationError("spark", type(spark).__name__, "a SparkSession")
    from kafka_direct import register

    register(spark)


def _job_control(spark: Any, group: str) -> JobControl | None:
    """Cancel the loop thread's jobs on ``stop(graceful=False)``, with the session's job tags.

    Classic PySpark: SparkContext job tags, which cover every job of the thread, RDD actions
    included (the session's own tags only reach DataFrame actions). Spark Connect: the session's
    tags. Without either, ``stop(graceful=False)`` waits for the running batch.
    """
    tag = f"kafka-direct-{group}-{uuid.uuid4().hex[:8]}".replace(",", "_")
    try:
        sc = spark.sparkContext
        sc.addJobTag  # noqa: B018 - probe: Spark Connect has no SparkContext
    except Exception:  # noqa: BLE001 - Connect raises its own error types here
        sc = None
    if sc is not None:
        return JobControl(
            lambda: sc.addJobTag(tag),
            lambda: sc.cancelJobsWithTag(tag),
            lambda: sc.removeJobTag(tag),
        )
    if all(hasattr(spark, name) for name in ("addTag", "interruptTag", "removeTag")):
        return JobControl(
            lambda: spark.addTag(tag),
            lambda: spark.interruptTag(tag),
            lambda: spark.removeTag(tag),
        )
    return None


def _source_options(raw: Mapping[str, str] | None) -> SourceOptions:
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


def _rate_function(value: float | Mapping[Any, float] | RateFunction | None) -> RateFunction:
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
            rates[TopicPartition(*key)] = _non_negative("maxRatePerPartition", rate)
        return lambda tp: rates.get(tp, 0.0)
    rate = _non_negative("maxRatePerPartition", value)
    return lambda _tp: rate


def _positive(name: str, value: object, unit: str) -> float:
    number = _non_negative(name, value)
    if number <= 0:
        raise ConfigurationError(name, value, f"a number > 0 ({unit})")
    return number


def _non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(name, value, "a number >= 0")
    if math.isinf(value):
        raise ConfigurationError(name, value, "a finite number")
    return float(value)
