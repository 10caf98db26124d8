"""The ``kafka_direct`` PySpark data source: batch and streaming readers, and the Kafka sink's
writers. Runs in Spark's Python processes: the driver-side planner and stream runner, and
executors (pickled readers and writers).

Thin by design: options are parsed by :mod:`~kafka_direct.config.source`, offsets planned by
:mod:`~kafka_direct.planning`, ranges read by :mod:`~kafka_direct.consumer.read`; the readers are
in :mod:`~kafka_direct.source.batch` and :mod:`~kafka_direct.source.stream`, the writers in
:mod:`~kafka_direct.source.sink`. Readers open nothing
in ``__init__``: PySpark builds them in several processes and pickles them to executors, so the
admin client is created on first use and dropped on pickling.

``load()`` is the last moment before a query starts, and the only one PySpark gives a source
(it asks for the schema). So :meth:`KafkaDirectDataSource.schema` checks there what can be
checked: every option, every ``kafka.`` setting as librdkafka will take it, and that the cluster
answers (a wrong address fails in about 10 s, with the cause). Options that only a stream
refuses (``endingOffsets``) cannot be told apart at ``load()``, which does not say whether the
read is a stream: the stream reader refuses them when the query starts, as one clear error.
"""

from __future__ import annotations

import logging
import sys
import types

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kafka_direct.config.source import parse_source_options
from kafka_direct.config.value_format import ValueFormat
from kafka_direct.consumer.rows import schema_ddl
from kafka_direct.errors import KafkaDirectError
from kafka_direct.logs import ensure_worker_logging
from kafka_direct.source.common import KafkaInputPartition, check_cluster, user_facing
from kafka_direct.source.value_decode import ValueDecode, row_schema, value_decode

# The batch reader, the stream reader and the sink are imported where they are built: Spark
# starts a fresh Python process for each stream's source runner and each of its sink commits,
# and each of those needs one of them only.

__all__ = ["KafkaDirectDataSource", "KafkaInputPartition"]

log = logging.getLogger(__name__)


class KafkaDirectDataSource(DataSource):
    """``spark.read`` / ``spark.readStream`` and ``df.write`` / ``df.writeStream``
    ``.format("kafka_direct")``."""

    @classmethod
    def name(cls) -> str:
        return "kafka_direct"

    @user_facing
    def schema(self) -> StructType | str:
        # Everything that can fail before a query starts fails here, at load().
        ensure_worker_logging()
        opts = parse_source_options(self.options, streaming=None)
        if opts.ranges is None:
            # Exact ranges come from a planner that has reached the cluster already (the
            # DStream-style API): asking again would cost every batch a round trip.
            check_cluster(opts)
        # valueFormat: the reader schema is fetched here, so a missing subject fails at load().
        decode = value_decode(opts.value_format)
        if decode is None:
            return schema_ddl(opts.include_headers)
        schema: StructType = row_schema(opts.include_headers, decode)
        return schema

    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        ensure_worker_logging()
        from kafka_direct.source.batch import batch_reader

        opts = parse_source_options(self.options, streaming=False)
        return batch_reader(opts, _planned_decode(opts.value_format, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafka_direct.source.stream import KafkaStreamReader, RefusedStreamReader

        ensure_worker_logging()
        try:
            opts = parse_source_options(self.options, streaming=True)
            return KafkaStreamReader(opts, _planned_decode(opts.value_format, schema))
        except KafkaDirectError as exc:
            # PySpark's stream runner cannot report an error raised here: it fails again in
            # its own cleanup (an UnboundLocalError) and buries ours. Raised from the first
            # call instead, it reaches the user as it is.
            return RefusedStreamReader(exc)

    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafka_direct.source.sink import KafkaBatchWriter, build_settings, refuse_overwrite

        ensure_worker_logging()
        if overwrite:
            refuse_overwrite()
        return KafkaBatchWriter(build_settings(self.options, schema))

    @user_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # overwrite is the Complete output mode: Spark's Kafka sink takes it and writes the whole
        # result table every micro-batch (a topic cannot be truncated), and so does this one.
        from kafka_direct.source.sink import KafkaStreamWriter, build_settings

        ensure_worker_logging()
        settings = build_settings(
            self.options, schema, stream=True, ask_cluster=not _in_sink_commit_runner()
        )
        return KafkaStreamWriter(settings)


#: The module of Spark's Python process that commits or aborts each micro-batch of a Python
#: streaming sink (pyspark/sql/worker/python_streaming_sink_runner.py).
SINK_COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"


def _in_sink_commit_runner() -> bool:
    """Whether Spark's sink commit runner is building this writer. It builds one for every
    micro-batch's commit or abort, after the tasks ran, and only calls ``commit`` or ``abort``
    on it, which ask nothing of the cluster: the checks that do (cluster, topics, a
    transactional producer) ran when the query started. Run there, they cost every micro-batch
    a round trip or more, and a broker down for a moment (a transaction coordinator that is
    moving) failed the query at the commit of a micro-batch whose tasks had all committed."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == SINK_COMMIT_RUNNER:
            return True
        frame = frame.f_back
    return False


def _planned_decode(value_format: ValueFormat, schema: StructType) -> ValueDecode | None:
    """The value decode of a reader, checked against the row schema ``load()`` planned."""
    decode = value_decode(value_format)
    if decode is not None:
        decode.check_planned(schema)
    return decode
