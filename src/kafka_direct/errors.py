"""The kafka_direct error hierarchy. Plain library: imported by every process.

Every error the library raises on purpose derives from :class:`KafkaDirectError`::

    KafkaDirectError
     ├── ConfigurationError          an option is missing, malformed or contradicts another
     │    └── UnsupportedKafkaOptionError   a kafka.* key the source owns (names the replacement)
     ├── DataLossError               offsets vanished or went backwards while failOnDataLoss=true
     ├── OffsetConflictError         an offset store was not where this batch expected (a replay)
     ├── BatchFailedError            a direct stream's batch function raised (nothing committed)
     ├── StreamStateError            a direct stream method was called in the wrong state
     ├── KafkaClientError            a librdkafka error, translated at one choke point (kafka_io)
     │    ├── TopicNotFoundError     a topic named in subscribe/assign does not exist
     │    └── FetchTimeoutError      an executor waited kafkaConsumer.pollTimeoutMs for data
     └── EmbeddedBrokerError         the embedded Tansu broker could not start or stop

Messages are written to be read on their own, outside a stack trace: they name the option or the
topic-partition, the value that was seen, what was expected, and how to fix it. They never contain
secrets: anything that may carry configuration goes through :func:`kafka_direct.options.redact`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BatchFailedError",
    "ConfigurationError",
    "DataLossError",
    "EmbeddedBrokerError",
    "FetchTimeoutError",
    "KafkaClientError",
    "KafkaDirectError",
    "OffsetConflictError",
    "StreamStateError",
    "TopicNotFoundError",
    "UnsupportedKafkaOptionError",
]


class KafkaDirectError(Exception):
    """Root of every error kafka_direct raises on purpose."""


class ConfigurationError(KafkaDirectError, ValueError):
    """An option is missing, malformed, or conflicts with another option.

    Raised on the driver while the source is created, so a query never starts with bad options.
    """

    def __init__(self, option: str, value: object, expected: str, fix: str | None = None) -> None:
        self.option = option
        self.value = value
        self.expected = expected
        self.fix = fix
        shown = "<not set>" if value is None else repr(value)
        message = f"Invalid option '{option}': got {shown}, expected {expected}."
        if fix:
            message += f" {fix}"
        super().__init__(message)


class UnsupportedKafkaOptionError(ConfigurationError):
    """A ``kafka.*`` option that the source manages itself, e.g. ``kafka.auto.offset.reset``."""

    def __init__(self, option: str, value: object, replacement: str) -> None:
        super().__init__(
            option,
            value,
            "this Kafka option not to be set, because the source manages it",
            replacement,
        )


class DataLossError(KafkaDirectError):
    """Offsets that should exist are gone: a topic was deleted, recreated, or aged out.

    Raised only with ``failOnDataLoss=true`` (the default). With ``failOnDataLoss=false`` the
    same condition is logged as a warning and the read skips to what is available.
    """

    def __init__(self, topic: str, partition: int, detail: str) -> None:
        self.topic = topic
        self.partition = partition
        super().__init__(
            f"Data loss on {topic}-{partition}: {detail}. Some data may have been lost because "
            "it is no longer available in Kafka: the topic may have been deleted or recreated, or "
            "the data aged out under the retention policy. If you want the query to continue "
            "with what is available, set the source option 'failOnDataLoss' to 'false'."
        )


class OffsetConflictError(KafkaDirectError):
    """An offset store did not hold the offsets this batch starts from.

    Raised by the exactly-once recipe ("advance the stored offsets only where they still equal
    this batch's start"): the batch was already applied (a replay) or another writer moved the
    offsets (a concurrent run). The database transaction is rolled back, so nothing is applied
    twice.
    """

    def __init__(self, group: str, detail: str) -> None:
        self.group = group
        super().__init__(
            f"Offsets of group '{group}' in the offset store conflict with this batch: {detail}. "
            "The batch was not applied. It was probably applied already (a replay) or another "
            "process is writing the same group; run one writer per group."
        )


class BatchFailedError(KafkaDirectError):
    """A direct stream's batch function raised: the batch was not committed, the stream stopped.

    ``__cause__`` is the function's exception; ``offset_ranges`` the batch's ranges.
    """

    def __init__(
        self, batch_id: int, ranges: Sequence[object], attempts: int, cause: BaseException
    ) -> None:
        self.batch_id = batch_id
        self.offset_ranges = list(ranges)
        self.attempts = attempts
        shown = ", ".join(str(r) for r in ranges[:5]) + (" ..." if len(ranges) > 5 else "")
        super().__init__(
            f"Batch {batch_id} failed in the foreachBatch function after {attempts} attempt(s): "
            f"{type(cause).__name__}: {cause}. Its offsets ({shown or 'no ranges'}) were not "
            "committed: a new stream with the same group resumes from the last commit. To retry "
            "a failed batch instead of stopping, pass failurePolicy='retry' and maxRetries."
        )


class StreamStateError(KafkaDirectError, RuntimeError):
    """A direct stream method was called in the wrong state (started twice, no function...)."""


class KafkaClientError(KafkaDirectError):
    """A librdkafka / confluent-kafka error, translated at one choke point.

    ``code`` is librdkafka's error name (e.g. ``_TRANSPORT``), ``retriable`` its own verdict.
    """

    def __init__(self, message: str, *, code: str | None = None, retriable: bool = False) -> None:
        self.code = code
        self.retriable = retriable
        super().__init__(message)


class TopicNotFoundError(KafkaClientError):
    """A topic named by ``subscribe`` or ``assign`` does not exist on the cluster."""


class FetchTimeoutError(KafkaClientError):
    """An executor waited ``kafkaConsumer.pollTimeoutMs`` without receiving an expected offset."""


class EmbeddedBrokerError(KafkaDirectError):
    """The embedded broker (Tansu from the ``embedded`` extra) could not be started or stopped."""
