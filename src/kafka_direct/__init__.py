"""kafka_direct: Spark Streaming's direct Kafka integration for PySpark 4, in Python.

Plain library; the public API is exactly ``__all__`` (a test pins it)::

    import kafka_direct
    kafka_direct.register(spark)
    df = (spark.readStream.format("kafka_direct")
          .option("kafka.bootstrap.servers", "host:9092")
          .option("subscribe", "events")
          .load())

No JVM jars, no ``--packages``: the source is a PySpark Python data source on confluent-kafka.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from kafka_direct.errors import (
    BatchFailedError,
    ConfigurationError,
    DataLossError,
    DeliveryError,
    EmbeddedBrokerError,
    FetchTimeoutError,
    IncompleteInputError,
    KafkaClientError,
    KafkaDirectError,
    NotAuthorizedError,
    OffsetConflictError,
    OffsetsUnavailableError,
    ReceiverFailedError,
    SinkColumnError,
    StreamStateError,
    TopicNotFoundError,
    UnsupportedKafkaOptionError,
)
from kafka_direct.offsets import OffsetRange, TopicPartition

if TYPE_CHECKING:
    from kafka_direct.config.share import ShareRecord
    from kafka_direct.dstream.kafka_utils import KafkaUtils
    from kafka_direct.dstream.receiver.progress import ReceiverBatchInfo
    from kafka_direct.dstream.receiver.share_stream import ShareKafkaStream
    from kafka_direct.dstream.receiver.stream import ReceiverKafkaStream
    from kafka_direct.dstream.strategies import ConsumerStrategies, LocationStrategies
    from kafka_direct.dstream.stream import BatchInfo, DirectKafkaStream
    from kafka_direct.stores import (
        KafkaGroupStore,
        SqlOffsetStore,
        exactly_once_foreach_batch,
        starting_offsets_json,
    )
    from kafka_direct.stores.base import OffsetStore

__all__ = [
    "FORMAT",
    "BatchFailedError",
    "BatchInfo",
    "ConfigurationError",
    "ConsumerStrategies",
    "DataLossError",
    "DeliveryError",
    "DirectKafkaStream",
    "EmbeddedBrokerError",
    "FetchTimeoutError",
    "IncompleteInputError",
    "KafkaClientError",
    "KafkaDirectError",
    "KafkaGroupStore",
    "KafkaUtils",
    "LocationStrategies",
    "NotAuthorizedError",
    "OffsetConflictError",
    "OffsetRange",
    "OffsetStore",
    "OffsetsUnavailableError",
    "ReceiverBatchInfo",
    "ReceiverFailedError",
    "ReceiverKafkaStream",
    "ShareKafkaStream",
    "ShareRecord",
    "SinkColumnError",
    "SqlOffsetStore",
    "StreamStateError",
    "TopicNotFoundError",
    "TopicPartition",
    "UnsupportedKafkaOptionError",
    "__version__",
    "exactly_once_foreach_batch",
    "register",
    "starting_offsets_json",
]

__version__ = "0.1.0"

#: The format name to pass to ``spark.read.format`` / ``spark.readStream.format``.
FORMAT = "kafka_direct"

logging.getLogger(__name__).addHandler(logging.NullHandler())

#: Imported on first use (PEP 562): Spark starts a fresh Python process for every stream's
#: source (its stream runner), which needs only the source; loading the DStream API, the
#: receivers and the stores there would delay every query's start (docs/performance.md).
_LAZY = {
    "ShareRecord": "kafka_direct.config.share",
    "KafkaUtils": "kafka_direct.dstream.kafka_utils",
    "ReceiverBatchInfo": "kafka_direct.dstream.receiver.progress",
    "ShareKafkaStream": "kafka_direct.dstream.receiver.share_stream",
    "ReceiverKafkaStream": "kafka_direct.dstream.receiver.stream",
    "ConsumerStrategies": "kafka_direct.dstream.strategies",
    "LocationStrategies": "kafka_direct.dstream.strategies",
    "BatchInfo": "kafka_direct.dstream.stream",
    "DirectKafkaStream": "kafka_direct.dstream.stream",
    "KafkaGroupStore": "kafka_direct.stores",
    "SqlOffsetStore": "kafka_direct.stores",
    "exactly_once_foreach_batch": "kafka_direct.stores",
    "starting_offsets_json": "kafka_direct.stores",
    "OffsetStore": "kafka_direct.stores.base",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafka_direct' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups never come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def register(spark: Any, *, fast_worker_start: bool = True) -> None:
    """Register the ``kafka_direct`` format with a SparkSession (once per session is enough).

    ``fast_worker_start`` lets the Python processes Spark starts for the source import PySpark's
    compiled bytecode rather than its zip (see ``kafka_direct.source.registration``).
    """
    from kafka_direct.source.registration import register as _register

    _register(spark, fast_worker_start=fast_worker_start)
