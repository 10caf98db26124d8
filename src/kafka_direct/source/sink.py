"""The Kafka sink's writers: ``df.write`` and ``df.writeStream`` ``.format("kafka_direct")``. Runs
in Spark's Python processes: the driver-side worker that builds the writer, and the driver-side
worker that runs ``commit`` / ``abort``; the pickled writer's ``write`` runs in executors, as
:mod:`~kafka_direct.source.sink_task`.

Thin by design: options are parsed by :mod:`~kafka_direct.config.sink`, columns matched by
:mod:`~kafka_direct.producer.columns`, and records produced by
:mod:`~kafka_direct.producer.write`. What can be checked before a write starts is checked when
PySpark builds the writer (:func:`build_settings`): every option, every column's type, the
producer config as librdkafka takes it, and that the cluster answers. PySpark builds a stream's
writer twice per micro-batch, so the librdkafka and cluster checks are made once per process
and configuration (:data:`RECHECK_AFTER_S`).

The default guarantee is Spark's: at-least-once. A task succeeds only once the broker
acknowledged every record it wrote. Records cannot be taken back from a topic, so ``abort`` (a
failed write, or a failed micro-batch) leaves what finished tasks wrote in place, and the retry
writes it again.

With ``deliveryGuarantee`` ``exactly-once`` each task writes in a Kafka transaction of its own,
committed by the task (:mod:`~kafka_direct.producer.transactional`; librdkafka cannot let the
driver commit for it). The driver's part: the transactional id prefix (``transactionalIdPrefix``,
else derived from a stream's ``checkpointLocation``; required for ``df.write``), a batch write's
id (``transactionalWriteId``, else a new one per write) and start, and the checks that the
cluster runs transactions and lets the principal commit markers (READ on the marker topic and
on the marker groups). ``commit`` and ``abort`` only report: what a finished task committed is
visible whatever happens to the rest of the job, and a replayed micro-batch (or a re-run of a
batch write with the same write id) skips it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
)
from pyspark.sql.types import StructType

from kafka_direct.config.clients import connection_config
from kafka_direct.config.fingerprint import config_fingerprint
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.sink import SinkOptions, parse_sink_options
from kafka_direct.errors import (
    ConfigurationError,
    KafkaClientError,
    KafkaDirectError,
)
from kafka_direct.executor.task_input import check_supported
from kafka_direct.kafka.access import authenticates, check_group, check_topics
from kafka_direct.kafka.admin import check_producer_config, new_admin_client
from kafka_direct.kafka.events import ClientEvents, reach_advice
from kafka_direct.kafka.translate import kafka_errors
from kafka_direct.logs import RepeatLimiter
from kafka_direct.producer.columns import ignored_columns_warning, plan_columns
from kafka_direct.producer.markers import (
    TransactionSettings,
    check_prefix,
    prefix_from_checkpoint,
    transactional_id,
)
from kafka_direct.producer.write import WriteSettings
from kafka_direct.source.sink_task import SinkCommitMessage, write_task

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


def refuse_overwrite() -> None:
    """``mode("overwrite")`` on a batch write: refused as Spark's Kafka sink refuses it."""
    raise ConfigurationError(
        "mode",
        "overwrite",
        "'append'",
        "Save mode Overwrite not allowed for Kafka: a topic is append-only, its records "
        "cannot be replaced (Spark's Kafka sink refuses it too). Use .mode('append').",
    )


def build_settings(
    options: Mapping[str, str],
    schema: StructType,
    *,
    stream: bool = False,
    ask_cluster: bool = True,
) -> WriteSettings:
    """Everything a write task needs, checked (see the module docstring). ``stream``: for
    ``writeStream`` (the transactional id prefix may come from the checkpoint location).
    ``ask_cluster=False`` skips the checks that ask the cluster (the options are checked all
    the same): for a writer built only to commit or abort a micro-batch whose tasks ran, which
    builds no client either, so its key and trust stores are not read (``keytool`` is a JVM
    start, in a process Spark starts afresh for every micro-batch's commit)."""
    opts = parse_sink_options(options, read_stores=ask_cluster)
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    columns = plan_columns(fields, opts.topic)
    warning = ignored_columns_warning(columns)
    if warning is not None:
        _warnings.log(log, logging.WARNING, ("ignored", columns.ignored), "%s", warning)
    if columns.topic_column_overridden:
        log.info("The 'topic' option (%s) wins over the 'topic' column", opts.topic)
    transactions = _transactions(opts, options, stream=stream)
    if ask_cluster:
        _check_once(opts, transactions)
    if transactions is not None and opts.fast_path:
        log.debug("deliveryGuarantee 'exactly-once' writes through the Python producer")
    return WriteSettings(
        producer_config=opts.producer,
        columns=columns,
        delivery_timeout_ms=opts.delivery_timeout_ms,
        cache_timeout_s=opts.cache_timeout_ms / 1000.0,
        cache_capacity=opts.cache_capacity,
        fast_path=opts.fast_path,
        transactions=transactions,
    )


def _transactions(
    opts: SinkOptions, options: Mapping[str, str], *, stream: bool
) -> TransactionSettings | None:
    """The exactly-once settings: the prefix (explicit, or a stream's checkpoint location) and,
    for ``df.write``, the write's id, made here once and pickled to every task."""
    if not opts.exactly_once:
        return None
    assert opts.marker_topic is not None
    check_supported()
    prefix = opts.transactional_id_prefix
    write_id = opts.transactional_write_id
    if write_id and stream:
        raise ConfigurationError(
            "transactionalWriteId",
            write_id,
            "no write id on writeStream",
            "A stream's tasks are matched to their markers by micro-batch id; the write id is "
            "for df.write. Remove the option.",
        )
    if not prefix and stream:
        checkpoint = {str(k).lower(): v for k, v in options.items()}.get("checkpointlocation")
        if not checkpoint:
            raise ConfigurationError(
                "transactionalIdPrefix",
                None,
                "a prefix, or the query's checkpointLocation given as a writeStream option",
                "deliveryGuarantee 'exactly-once' needs transactional ids that stay the same "
                "across restarts of the query. The sink derives them from "
                ".option('checkpointLocation', ...) on writeStream (it does not see "
                "spark.sql.streaming.checkpointLocation); set that, or "
                ".option('transactionalIdPrefix', 'a-name-for-this-query').",
            )
        prefix = prefix_from_checkpoint(checkpoint)
    elif not prefix:
        raise ConfigurationError(
            "transactionalIdPrefix",
            None,
            "a prefix for df.write with deliveryGuarantee 'exactly-once'",
            "Each write task's transactional id is '<prefix>-<partition>', the same for every "
            "attempt of the task, so that only one attempt's rows become visible. Set "
            ".option('transactionalIdPrefix', 'a-name-for-this-job'); one write at a time per "
            "prefix. A failed write's tasks that committed stay visible, and running the write "
            "again writes their rows again, unless both runs also set the same "
            ".option('transactionalWriteId', 'a-name-for-this-data').",
        )
    return TransactionSettings(
        prefix=check_prefix(prefix),
        marker_topic=opts.marker_topic,
        write_id=None if stream else (write_id or uuid.uuid4().hex),
        consumer_config=KafkaConfig(connection_config(opts.kafka)),
        check_rows=opts.replay_check_rows,
        write_started_ms=None if stream else int(time.time() * 1000),
        write_id_given=bool(write_id) and not stream,
    )


def _check_once(opts: SinkOptions, transactions: TransactionSettings | None) -> None:
    fingerprint = config_fingerprint(
        {
            **opts.producer,
            "topic option": opts.topic or "",
            "transactions": "" if transactions is None else transactions.prefix,
        }
    )
    now = time.monotonic()
    with _checked_lock:
        last = _checked.get(fingerprint)
    if last is not None and now - last < RECHECK_AFTER_S:
        return
    check_producer_config(opts.producer, opts.kafka)
    _check_cluster(opts)
    if transactions is not None:
        from kafka_direct.producer.txn_probe import cluster_outlook, probe_transactions

        def look() -> tuple[bool, str]:
            admin = new_admin_client(connection_config(opts.kafka))
            return cluster_outlook(admin, CONNECT_TIMEOUT_S)

        probe_transactions(opts.producer, transactions.prefix, CONNECT_TIMEOUT_S, look)
        # After the probe, whose refusal of the transactional ids comes first.
        _check_marker_groups(opts, transactions.prefix)
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
        said = events.unanswered()
        raise KafkaClientError(
            f"The Kafka sink could not reach the cluster at 'kafka.bootstrap.servers'="
            f"{opts.bootstrap_servers!r} within {CONNECT_TIMEOUT_S:g} s: {said}."
            f"{reach_advice(said)} Nothing was written.",
            code=exc.code,
            retriable=False,
        ) from exc
    # Kafka hides a topic the principal may not DESCRIBE: say so (and who) rather than warn
    # that it does not exist; a topic it may see but not WRITE (or READ) fails here too.
    config = connection_config(opts.kafka)
    with kafka_errors("Checking the rights on the sink's topics"):
        if opts.topic is not None:
            check_topics(admin, config, [opts.topic], "WRITE", timeout_s=CONNECT_TIMEOUT_S)
        if opts.marker_topic is not None:
            check_topics(
                admin, config, [opts.marker_topic], "READ", timeout_s=CONNECT_TIMEOUT_S,
                what="deliveryGuarantee 'exactly-once' commits each task's marker as an "
                "offset on this topic ('transactionMarkerTopic'), which Kafka allows to "
                "readers of the topic only",
            )  # fmt: skip
    if opts.marker_topic is not None and not _topic_listed(admin, metadata, opts.marker_topic):
        raise ConfigurationError(
            "transactionMarkerTopic" if opts.marker_topic != opts.topic else "topic",
            opts.marker_topic,
            "an existing topic with deliveryGuarantee 'exactly-once'",
            "Each task commits its marker on partition 0 of this topic (an offset of its own "
            "consumer group), which Kafka accepts only for a topic that exists. Create the "
            "topic first; nothing was written.",
        )
    if opts.topic is not None and opts.topic not in metadata.topics:
        log.warning(
            "Topic '%s' does not exist on the cluster at %s: the write relies on the brokers "
            "creating it (auto.create.topics.enable), and fails otherwise",
            opts.topic, opts.bootstrap_servers,
        )  # fmt: skip


def _check_marker_groups(opts: SinkOptions, prefix: str) -> None:
    """Refuse a principal that may not READ the marker groups (``<prefix>-<n>``): each task
    commits its marker as an offset of its group, which Kafka allows to the group's readers
    only. Checked on task 0's group: the groups share the prefix, as their ACL does."""
    config = connection_config(opts.kafka)
    if not authenticates(config):
        return
    admin = new_admin_client(config, ClientEvents("The Kafka admin client"))
    group = transactional_id(prefix, 0)
    with kafka_errors("Checking the rights on the sink's marker groups"):
        check_group(
            admin, config, group, timeout_s=CONNECT_TIMEOUT_S,
            what="deliveryGuarantee 'exactly-once' commits each task's marker as an offset of "
            f"a consumer group named like its transactional id ('{prefix}-<n>'), which Kafka "
            "allows to readers of the group only (grant READ on the group prefix "
            f"'{prefix}-')",
        )  # fmt: skip


#: How long a topic missing from the first metadata answer is asked for again.
TOPIC_SETTLE_S = 5.0


def _topic_listed(admin: Any, metadata: Any, topic: str) -> bool:
    """Whether the cluster lists ``topic``. A topic created a moment ago may be missing from
    the answering broker's metadata until it applies the controller's record, so the metadata
    is asked again for up to :data:`TOPIC_SETTLE_S` before a missing topic is refused (a
    script that creates the topic, then writes, met this). All topics are asked for, never
    this one by name: that request may create it on a broker that creates topics itself."""
    if topic in metadata.topics:
        return True
    deadline = time.monotonic() + TOPIC_SETTLE_S
    while time.monotonic() < deadline:
        time.sleep(0.2)
        with contextlib.suppress(KafkaDirectError), kafka_errors("Listing the topics"):
            if topic in admin.list_topics(timeout=CONNECT_TIMEOUT_S).topics:
                return True
    return False


def _summary(messages: list[SinkCommitMessage | None]) -> tuple[int, int, int]:
    """(records written by finished tasks, finished tasks, failed tasks)."""
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    return sum(m.records for m in done), len(done), len(messages) - len(done)


def _skipped(messages: list[Any]) -> str:
    """The note for a log line when an exactly-once replay found tasks already committed."""
    n = sum(1 for m in messages if isinstance(m, SinkCommitMessage) and m.skipped)
    return f" ({n} task(s) had been committed by an earlier attempt or run)" if n else ""


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("kafka_direct").mode("append").save()``."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.settings, iterator, stream=False)

    def commit(self, messages: list[Any]) -> None:
        records, tasks, _ = _summary(messages)
        log.info("Wrote %d record(s) to Kafka in %d task(s)%s", records, tasks, _skipped(messages))

    def abort(self, messages: list[Any]) -> None:
        records, tasks, failed = _summary(messages)
        txn = self.settings.transactions
        if txn is not None:
            rerun = (
                f"running it again with the same 'transactionalIdPrefix' and "
                f"'transactionalWriteId' ('{txn.write_id}') skips those tasks"
                if txn.write_id_given
                else "running it again writes those tasks' records again, unless both runs "
                "set the same 'transactionalWriteId'"
            )
            log.warning(
                "The exactly-once write to Kafka failed (%d task(s) failed). The %d task(s) "
                "that finished committed their transactions: their %d record(s) are visible to "
                "read_committed readers (each task commits its own; librdkafka has no two-phase "
                "commit for the driver to hold them back). This write made none of its "
                "records visible twice, but %s.",
                failed, tasks, records, rerun,
            )  # fmt: skip
            return
        log.warning(
            "The write to Kafka failed (%d task(s) failed). The %d record(s) written by the %d "
            "task(s) that finished stay in Kafka: a topic cannot take records back. Writing "
            "again writes them again (at-least-once).",
            failed, records, tasks,
        )  # fmt: skip


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafka_direct")``: every micro-batch, at-least-once or
    exactly-once."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.settings, iterator, stream=True)

    def commit(self, messages: list[Any], batchId: int) -> None:
        records, tasks, _ = _summary(messages)
        log.info(
            "Micro-batch %d wrote %d record(s) to Kafka in %d task(s)%s",
            batchId, records, tasks, _skipped(messages),
        )  # fmt: skip

    def abort(self, messages: list[Any], batchId: int) -> None:
        records, tasks, failed = _summary(messages)
        if self.settings.transactions is not None:
            log.warning(
                "Micro-batch %d failed (%d task(s) failed). The %d task(s) that finished "
                "committed their %d record(s); when the query runs the micro-batch again, "
                "those tasks find their markers and write nothing again (exactly-once).",
                batchId, failed, tasks, records,
            )  # fmt: skip
            return
        log.warning(
            "Micro-batch %d failed (%d task(s) failed). The %d record(s) written by the %d "
            "task(s) that finished stay in Kafka; the batch is not committed, so the query "
            "writes it again when it runs it again (at-least-once: duplicates, never loss).",
            batchId, failed, records, tasks,
        )  # fmt: skip
