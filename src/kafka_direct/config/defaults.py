"""Every source option's default, the ``kafka.*`` keys the library owns, and durations. Pure: plain
library.
"""

from __future__ import annotations

import re

#: Every source option with its default ("" = no default). Names as documented; lookup is
#: case-insensitive. Kept in docs/reading.md's options table order.
OPTION_DEFAULTS: dict[str, str] = {
    "subscribe": "",
    "subscribePattern": "",
    "assign": "",
    "startingOffsets": "",
    "startingTimestamp": "",
    "startingOffsetsByTimestamp": "",
    "startingOffsetsByTimestampStrategy": "error",
    "endingOffsets": "",
    "endingTimestamp": "",
    "endingOffsetsByTimestamp": "",
    "failOnDataLoss": "true",
    "includeHeaders": "false",
    "kafkaConsumer.pollTimeoutMs": "120000",
    # Attempts in all, and the wait between them: what Spark's KafkaOffsetReaderAdmin reads
    # (its documentation says 10 ms; its code, the behaviour a job moved from it gets, 1000).
    "fetchOffset.numRetries": "3",
    "fetchOffset.retryIntervalMs": "1000",
    # How long a stream waits for a partition, or the whole cluster, that gives no offsets.
    "fetchOffset.unavailableTimeout": "10m",
    "maxOffsetsPerTrigger": "",
    "minOffsetsPerTrigger": "",
    "maxTriggerDelay": "15m",
    "maxOffsetsPerPartitionPerTrigger": "",
    "minPartitions": "",
    "maxRecordsPerPartition": "",
    # Small ranges are packed into one Spark task up to this many records (planning.packing).
    "maxRecordsPerTask": "1000000",
    "groupIdPrefix": "spark-kafka-source",
    "commitOffsetsToGroup": "",
    "commitOffsets": "true",
    "committedOffsetsFallback": "error",
    "consumerCache.enabled": "true",
    "consumerCache.capacity": "64",
    "consumerCache.timeoutMs": "300000",
    "arrowBatchSize": "20000",
    # The most key + value + header bytes in one Arrow batch a read task hands Spark (with
    # arrowBatchSize, whichever comes first); it also sizes librdkafka's prefetch. Spark's JVM
    # holds a few batches per task in its direct memory (1 GB by default): see docs/reading.md.
    "maxBatchBytes": "16m",
    # A read task's memory, from which maxBatchBytes is sized (a twelfth) when it is not set
    # itself; unset by default (the default maxBatchBytes keeps a task within about 130 MB).
    "taskMemoryBudget": "",
    "fastPath.enabled": "true",
    # Exact ranges to read instead of planning them (the DStream API's batches, createRDD).
    "offsetRanges": "",
    # Batch reads: narrow the planned ranges by the query's filters on topic, partition, offset
    # and timestamp (planning.pushdown). Needs spark.sql.python.filterPushdown.enabled=true.
    "pushdown.enabled": "true",
    # A Python function ('module:function') that gives OAUTHBEARER tokens (config.oauth).
    "oauthProvider": "",
    # librdkafka defaults to read_committed; Spark (the Java client) to read_uncommitted. We
    # follow Spark so a query switched from format("kafka") sees the same records.
    "kafka.isolation.level": "read_uncommitted",
}

#: kafka.* keys the source manages itself → what to do instead (Spark's wording where it has one).
SOURCE_OWNED_KAFKA_KEYS: dict[str, str] = {
    "auto.offset.reset": (
        "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' to specify "
        "where to start (and 'failOnDataLoss' for offsets that are out of range)."
    ),
    "enable.auto.commit": (
        "Offsets are tracked in Spark's checkpoint, never auto-committed; remove the option."
    ),
    "key.deserializer": (
        "Keys are always returned as binary; deserialize them with DataFrame operations, "
        "e.g. col('key').cast('string')."
    ),
    "value.deserializer": (
        "Values are always returned as binary; deserialize them with DataFrame operations, "
        "e.g. col('value').cast('string') or from_json."
    ),
    "key.serializer": "The source reads only; serializers do not apply. Remove the option.",
    "value.serializer": "The source reads only; serializers do not apply. Remove the option.",
    "enable.partition.eof": "The source sets it on executors to detect the log end; remove it.",
    "interceptor.classes": "Java interceptors do not exist in librdkafka; remove the option.",
}

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.I)

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """Spark's ``timeStringAsMs``: '15m', '30s', '500ms', '1h', '2d'; a bare number is ms."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


_BYTES = re.compile(r"^\s*(\d+)\s*(b|k|kb|m|mb|g|gb)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30}
_UNIT_BYTES["gb"] = 1 << 30


def parse_bytes(text: str) -> int:
    """Spark's ``byteStringAsBytes``: '16m', '512k', '1g' (binary units); a bare number is
    bytes."""
    match = _BYTES.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r}")
    return int(match.group(1)) * _UNIT_BYTES[(match.group(2) or "b").lower()]
