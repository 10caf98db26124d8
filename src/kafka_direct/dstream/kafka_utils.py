"""``KafkaUtils``: Spark's entry points, ``createDirectStream`` and ``createRDD``, over the
``kafka_direct`` batch source, Spark's receiver-based ``createStream``, and
``createShareStream``, its share-group (queue) form. Runs in the Spark
driver (the user's process).

Every batch DataFrame is an ordinary ``spark.read.format("kafka_direct")`` read of exactly the
planned ranges (the ``offsetRanges`` option), read by the same executor code as the structured
source; the batch reader plans nothing and asks the cluster nothing. Without an
``offsetStore``, ``commitAsync`` commits to the Kafka consumer group (``__consumer_offsets``)
through the admin client, where ``kafka-consumer-groups --describe`` and lag monitors see it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct.config.clients import probe_consumer_config
from kafka_direct.config.dstream import (
    DirectStreamConfig,
    FailurePolicy,
    RateFunction,
    direct_stream_config,
    rdd_ranges,
    require_instance,
    stream_source_options,
    validate_params,
)
from kafka_direct.config.receiver import receiver_stream_config
from kafka_direct.config.share import RecordCheck, share_stream_config
from kafka_direct.dstream.planner import DirectStreamPlanner
from kafka_direct.dstream.receiver.share_stream import ShareKafkaStream
from kafka_direct.dstream.receiver.stream import ReceiverKafkaStream
from kafka_direct.dstream.strategies import ConsumerStrategy, LocationStrategy, warn_if_ignored
from kafka_direct.dstream.stream import DirectKafkaStream, JobControl
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, ranges_to_json
from kafka_direct.planning.patience import OffsetPatience
from kafka_direct.planning.pid import PIDRateEstimator
from kafka_direct.stores.base import OffsetStore
from kafka_direct.stores.kafka_store import KafkaGroupStore

__all__ = ["KafkaUtils", "batch_frame"]


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
        Kafka group. See docs/dstream.md for ``failurePolicy`` and the lifecycle.
        """
        require_instance(
            "locationStrategy",
            locationStrategy,
            LocationStrategy,
            "LocationStrategies.PreferConsistent()",
        )
        require_instance(
            "consumerStrategy",
            consumerStrategy,
            ConsumerStrategy,
            "a ConsumerStrategies.Subscribe/Assign(...)",
        )
        if offsetStore is not None:
            require_instance("offsetStore", offsetStore, OffsetStore, "an OffsetStore instance")
        config = direct_stream_config(
            batch_interval=batchInterval,
            max_rate_per_partition=maxRatePerPartition,
            min_rate_per_partition=minRatePerPartition,
            backpressure=backpressure,
            initial_rate=initialRate,
            pid_proportional=pidProportional,
            pid_integral=pidIntegral,
            pid_derivative=pidDerivative,
            pid_min_rate=pidMinRate,
            fail_on_data_loss=failOnDataLoss,
            failure_policy=failurePolicy,
            max_retries=maxRetries,
            retry_interval=retryInterval,
            source_options=sourceOptions,
            retained_batches=retainedBatches,
        )
        # A librdkafka typo fails here, naming the key, not at the first batch as a broker
        # that cannot be reached. (Imported here: it loads the Kafka client.)
        from kafka_direct.kafka.admin import check_consumer_config

        check_consumer_config(probe_consumer_config(consumerStrategy.kafka), consumerStrategy.kafka)
        warn_if_ignored(locationStrategy)
        _register(spark)
        return _direct_stream(spark, consumerStrategy, config, offsetStore)

    @staticmethod
    def createStream(
        spark: Any,
        kafkaParams: Mapping[str, Any],
        topics: Sequence[str] | Mapping[str, int],
        *,
        batchInterval: float,
        numReceivers: int = 1,
        writeAheadLog: bool = True,
        walDir: str | None = None,
        maxRatePerReceiver: float | None = None,
        maxPendingBlocks: int | None = None,
        blockInterval: float = 0.2,
        includeHeaders: bool = False,
        retainedBatches: int = 1000,
    ) -> ReceiverKafkaStream:
        """Spark's receiver-based stream: ``numReceivers`` members of ``group.id`` subscribe
        to ``topics`` on executors and log what they receive in ``walDir`` (a directory every
        node shares), committing each block once it is logged; every ``batchInterval`` s the
        logged blocks form the batch. At-least-once. See docs/dstream.md, "Receiver or direct?".
        """
        config = receiver_stream_config(
            kafkaParams,
            topics,
            batch_interval=batchInterval,
            num_receivers=numReceivers,
            write_ahead_log=writeAheadLog,
            wal_dir=walDir,
            max_rate_per_receiver=maxRatePerReceiver,
            max_pending_blocks=maxPendingBlocks,
            block_interval=blockInterval,
            include_headers=includeHeaders,
            retained_batches=retainedBatches,
        )
        _register(spark)
        return ReceiverKafkaStream(spark, config, jobs=_job_control(spark, config.group))

    @staticmethod
    def createShareStream(
        spark: Any,
        kafkaParams: Mapping[str, Any],
        topics: Sequence[str],
        *,
        batchInterval: float,
        walDir: str,
        numReceivers: int = 1,
        maxDeliveryAttempts: int = 4,
        recordCheck: RecordCheck | None = None,
        ackCommitInterval: float = 1.0,
        maxPendingBlocks: int | None = None,
        includeHeaders: bool = False,
        retainedBatches: int = 1000,
    ) -> ShareKafkaStream:
        """A queue: ``numReceivers`` members of the share group ``group.id`` (KIP-932, Kafka
        4.2+) read ``topics`` together on executors, however many partitions they have. Each
        receiver logs what it acquires in ``walDir`` and acknowledges a record only once its
        block is logged; every ``batchInterval`` s the logged blocks form the batch.
        ``recordCheck(record)`` runs in the receivers before a record is logged: when it raises,
        the record is released for another delivery, and rejected (and named in
        ``stream.rejected``) on delivery ``maxDeliveryAttempts``. At-least-once. See
        docs/queues.md.
        """
        config = share_stream_config(
            kafkaParams,
            topics,
            batch_interval=batchInterval,
            num_receivers=numReceivers,
            wal_dir=walDir,
            max_pending_blocks=maxPendingBlocks,
            include_headers=includeHeaders,
            max_delivery_attempts=maxDeliveryAttempts,
            record_check=recordCheck,
            ack_commit_interval=ackCommitInterval,
            retained_batches=retainedBatches,
        )
        _register(spark)
        return ShareKafkaStream(spark, config, jobs=_job_control(spark, config.group))

    @staticmethod
    def createRDD(
        spark: Any,
        kafkaParams: Mapping[str, Any],
        offsetRanges: Iterable[OffsetRange],
        locationStrategy: LocationStrategy | None = None,
        sourceOptions: Mapping[str, str] | None = None,
    ) -> Any:
        """A DataFrame over exactly ``offsetRanges``: Spark's ``KafkaRDD``, for one-off reads."""
        kafka, group, _reset = validate_params(kafkaParams, require_group=False)
        ranges = rdd_ranges(offsetRanges)
        stream_source_options(sourceOptions)
        if locationStrategy is not None:
            warn_if_ignored(locationStrategy)
        _register(spark)
        if group:
            kafka = kafka.merged({"group.id": group})
        return batch_frame(spark, kafka, ranges, dict(sourceOptions or {}))


def _direct_stream(
    spark: Any,
    strategy: ConsumerStrategy,
    config: DirectStreamConfig,
    offset_store: OffsetStore | None,
) -> DirectKafkaStream:
    """The direct stream's parts, wired: Spark's ``DirectKafkaInputDStream``."""
    from kafka_direct.kafka.offset_reader import AdminOffsetReader  # imports the Kafka client

    store: OffsetStore = offset_store or KafkaGroupStore(strategy.kafka)
    group = strategy.group_id
    fetch = config.source.fetch_offset
    reader = AdminOffsetReader(
        strategy.kafka,
        isolation_level=strategy.isolation_level,
        num_retries=fetch.num_retries,
        retry_interval_ms=fetch.retry_interval_ms,
    )
    planner = DirectStreamPlanner(
        strategy,
        reader,
        lambda tps: store.load(group, tps),
        batch_interval_s=config.batch_interval_s,
        max_rate=config.max_rate,
        min_rate=lambda _tp: config.min_rate,
        fail_on_data_loss=config.fail_on_data_loss,
        patience=OffsetPatience(fetch.unavailable_timeout_ms, what=f"Stream {group}"),
    )
    pid = config.backpressure
    estimator = None
    if pid is not None:
        estimator = PIDRateEstimator(
            max(1, round(config.batch_interval_s * 1000)),
            pid.proportional,
            pid.integral,
            pid.derivative,
            pid.min_rate,
        )
    kafka = strategy.kafka.merged({"group.id": group})
    options = config.batch_options
    return DirectKafkaStream(
        strategy,
        planner,
        lambda ranges: batch_frame(spark, kafka, ranges, options),
        batch_interval_s=config.batch_interval_s,
        offset_store=store,
        owns_store=offset_store is None,
        estimator=estimator,
        initial_rate=config.initial_rate,
        failure_policy=config.failure_policy,
        max_retries=config.max_retries,
        retry_interval_s=config.retry_interval_s,
        retained_batches=config.retained_batches,
        jobs=_job_control(spark, group),
    )


def batch_frame(
    spark: Any, kafka: Mapping[str, str], ranges: Sequence[OffsetRange], options: Mapping[str, str]
) -> Any:
    """The DataFrame of exactly ``ranges``: one read of the batch source with the
    ``offsetRanges`` option, so nothing is planned again and no admin request is made. A batch
    with no new records is an empty DataFrame with the source's schema, without touching Kafka.
    """
    wanted = [r for r in ranges if r.count() > 0]
    if not wanted:
        from kafka_direct.consumer.rows import schema_ddl

        headers = any(
            k.lower() == "includeheaders" and v.lower() == "true" for k, v in options.items()
        )
        return spark.createDataFrame([], schema_ddl(headers))
    reader = spark.read.format("kafka_direct")
    for key, value in kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.option("offsetRanges", json.dumps(ranges_to_json(wanted))).load()


def _register(spark: Any) -> None:
    if not hasattr(spark, "read"):
        raise ConfigurationError("spark", type(spark).__name__, "a SparkSession")
    from kafka_direct.source.registration import register

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
