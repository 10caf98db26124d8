"""The Kafka sink's writers: ``df.write`` and ``df.writeStream`` ``.format("kafka_direct")``. Runs
in Spark's Python processes: the driver-side worker that builds the writer, executors (the
pickled writer's ``write``), and the driver-side worker that runs ``commit`` / ``abort``.

Thin by design: options are parsed by :mod:`~kafka_direct.config.sink`, columns matched by
:mod:`~kafka_direct.producer.columns`, and records produced by
:mod:`~kafka_direct.producer.write`. What can be checked before a write starts is checked when
PySpark builds the writer (:func:`build_settings`): every option, every column's type, the
producer config as librdkafka takes it, and that the cluster answers. PySpark builds a stream's
writer twice per micro-batch, so the librdkafka and cluster checks are made once per process
and configuration (:data:`RECHECK_AFTER_S`).

The guarantee is Spark's: at-least-once. A task succeeds only once the broker acknowledged every
record it wrote. Records cannot be taken back from a topic, so ``abort`` (a failed write, or a
failed micro-batch) leaves what finished tasks wrote in place, and the retry writes it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kafka_direct.config.sink import SinkOptions, connection_config, parse_sink_options
from kafka_direct.consumer.pool import config_fingerprint
from kafka_direct.errors import ConfigurationError, KafkaClientError, KafkaDirectError
from kafka_direct.kafka.admin import check_producer_config, new_admin_client
from kafka_direct.kafka.events import ClientEvents, reach_advice
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.logs import RepeatLimiter, ensure_worker_logging
from kafka_direct.producer.columns import ignored_columns_warning, plan_columns
from kafka_direct.producer.write import WriteSettings, write_batches

__all__ = [
    "KafkaBatchWriter",
    "KafkaStreamWriter",
    "SinkCommitMessage",
    "build_settings",
    "refuse_overwrite",
]

log = logging.getLogger(__name__)

#: How long a successful check of a configuration (librdkafka, cluster) holds in one process.
RECHECK_AFTER_S = 300.0

#: How long the check waits for the cluster's first answer.
CONNECT_TIMEOUT_S = 10.0

_checked_lock = threading.Lock()
_checked: dict[str, float] = {}
_warnings = RepeatLimiter()


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task reports to ``commit`` / ``abort``: its records were acknowledged."""

    records: int
    batches: int
    seconds: float
    kind: str
    partition_id: int = -1
    attempt: int = 0
    batch_id: int | None = None


def refuse_overwrite() -> None:
    """``mode("overwrite")`` on a batch write: refused as Spark's Kafka sink refuses it."""
    raise ConfigurationError(
        "mode",
        "overwrite",
        "'append'",
        "Save mode Overwrite not allowed for Kafka: a topic is append-only, its records "
        "cannot be replaced (Spark's Kafka sink refuses it too). Use .mode('append').",
    )


def build_settings(options: Mapping[str, str], schema: StructType) -> WriteSettings:
    """Everything a write task needs, checked (see the module docstring)."""
    opts = parse_sink_options(options)
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    columns = plan_columns(fields, opts.topic)
    warning = ignored_columns_warning(columns)
    if warning is not None:
        _warnings.log(log, logging.WARNING, ("ignored", columns.ignored), "%s", warning)
    if columns.topic_column_overridden:
        log.info("The 'topic' option (%s) wins over the 'topic' column", opts.topic)
    _check_once(opts)
    return WriteSettings(
        producer_config=opts.producer,
        columns=columns,
        delivery_timeout_ms=opts.delivery_timeout_ms,
        cache_timeout_s=opts.cache_timeout_ms / 1000.0,
        cache_capacity=opts.cache_capacity,
        fast_path=opts.fast_path,
    )


def _check_once(opts: SinkOptions) -> None:
    fingerprint = config_fingerprint({**opts.producer, "topic option": opts.topic or ""})
    now = time.monotonic()
    with _checked_lock:
        last = _checked.get(fingerprint)
    if last is not None and now - last < RECHECK_AFTER_S:
        return
    check_producer_config(opts.producer, opts.kafka)
    _check_cluster(opts)
    with _checked_lock:
        _checked[fingerprint] = now


def _check_cluster(opts: SinkOptions) -> None:
    """Refuse a cluster that does not answer within :data:`CONNECT_TIMEOUT_S`, with the client's
    own explanation; warn about a ``topic`` it does not have."""
    events = ClientEvents("The Kafka admin client")
    admin = new_admin_client(connection_config(opts.kafka), events)
    try:
        with kafka_errors("Connecting to the Kafka cluster"):
            metadata = admin.list_topics(timeout=CONNECT_TIMEOUT_S)
    except KafkaClientError as exc:
        admin.poll(0)  # hands the client's error events over
        said = events.summary() or (
            "something accepts connections there but did not answer as a Kafka broker (check "
            "the port, and 'kafka.security.protocol' against the listener)"
        )
        raise KafkaClientError(
            f"The Kafka sink could not reach the cluster at 'kafka.bootstrap.servers'="
            f"{opts.bootstrap_servers!r} within {CONNECT_TIMEOUT_S:g} s: {said}."
            f"{reach_advice(said)} Nothing was written.",
            code=exc.code,
            retriable=False,
        ) from exc
    if opts.topic is not None and opts.topic not in metadata.topics:
        log.warning(
            "Topic '%s' does not exist on the cluster at %s: the write relies on the brokers "
            "creating it (auto.create.topics.enable), and fails otherwise",
            opts.topic, opts.bootstrap_servers,
        )  # fmt: skip


def _task_context() -> tuple[int, int, int | None]:
    """(partition id, attempt, micro-batch id or None) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return -1, 0, None
    # Not public, but the only way a stream writer's task learns its micro-batch.
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return ctx.partitionId(), ctx.attemptNumber(), None if batch is None else int(batch)


def _write(settings: WriteSettings, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    ensure_worker_logging()
    partition_id, attempt, batch_id = _task_context()
    try:
        result = write_batches(settings, batches, attempt=attempt)
    except KafkaDirectError as exc:
        # Spark prints the Python traceback inside its own message: keep it to the sentence.
        raise exc.with_traceback(None) from None
    return SinkCommitMessage(
        result.records, result.batches, result.seconds, result.kind, partition_id, attempt, batch_id
    )


def _summary(messages: list[SinkCommitMessage | None]) -> tuple[int, int, int]:
    """(records written by finished tasks, finished tasks, failed tasks)."""
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    return sum(m.records for m in done), len(done), len(messages) - len(done)


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kafka_direct").mode("append").save()``."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.settings, iterator)

    def commit(self, messages: list[Any]) -> None:
        records, tasks, _ = _summary(messages)
        log.info("Wrote %d record(s) to Kafka in %d task(s)", records, tasks)

    def abort(self, messages: list[Any]) -> None:
        records, tasks, failed = _summary(messages)
        log.warning(
            "The write to Kafka failed (%d task(s) failed). The %d record(s) written by the %d "
            "task(s) that finished stay in Kafka: a topic cannot take records back. Writing "
            "again writes them again (at-least-once).",
            failed, records, tasks,
        )  # fmt: skip


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafka_direct")``: every micro-batch, at-least-once."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return _write(self.settings, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        records, tasks, _ = _summary(messages)
        log.info(
            "Micro-batch %d wrote %d record(s) to Kafka in %d task(s)", batchId, records, tasks
        )

    def abort(self, messages: list[Any], batchId: int) -> None:
        records, tasks, failed = _summary(messages)
        log.warning(
            "Micro-batch %d failed (%d task(s) failed). The %d record(s) written by the %d "
            "task(s) that finished stay in Kafka; the batch is not committed, so the query "
            "writes it again when it runs it again (at-least-once: duplicates, never loss).",
            batchId, failed, records, tasks,
        )  # fmt: skip
