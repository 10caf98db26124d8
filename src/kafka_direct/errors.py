"""The kafka_direct error hierarchy. Plain library: imported by every process.

Every error the library raises on purpose derives from :class:`KafkaDirectError`::

    KafkaDirectError
     ├── ConfigurationError          an option is missing, malformed or contradicts another
     │    ├── UnsupportedKafkaOptionError   a kafka.* key the library owns (names the replacement)
     │    └── SinkColumnError         a column the sink writes is missing or of the wrong type
     ├── DataLossError               offsets vanished or went backwards while failOnDataLoss=true
     ├── OffsetConflictError         an offset store was not where this batch expected (a replay)
     ├── BatchFailedError            a direct stream's batch function raised (nothing committed)
     ├── IncompleteInputError        a sink task's input was cut off upstream (nothing committed)
     ├── ReceiverFailedError         a receiver stream's receiver kept dying, or cannot run
     ├── StreamStateError            a direct stream method was called in the wrong state
     ├── KafkaClientError            a librdkafka error, translated in one place (kafka/translate)
     │    ├── TopicNotFoundError     a topic named in subscribe/assign does not exist
     │    ├── NotAuthorizedError     Kafka's authorizer refused an operation (names the principal)
     │    ├── OffsetsUnavailableError  the cluster gave no valid offset for some partitions
     │    ├── FetchTimeoutError      an executor waited kafkaConsumer.pollTimeoutMs for data
     │    └── DeliveryError          the sink's producer could not deliver a record
     └── EmbeddedBrokerError         the embedded Tansu broker could not start or stop

Messages are written to be read on their own, outside a stack trace: they name the option or the
topic-partition, the value that was seen, what was expected, and how to fix it. They never contain
secrets: :class:`ConfigurationError` passes every value through
:func:`kafka_direct.redaction.shown` (secret keys, their near-misses and unknown Kafka keys
are never echoed), and anything else that may carry configuration goes through
:func:`kafka_direct.redaction.redact`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from kafka_direct.redaction import Scrubber
from kafka_direct.redaction import shown as _shown

__all__ = [
    "BatchFailedError",
    "ConfigurationError",
    "DataLossError",
    "DeliveryError",
    "EmbeddedBrokerError",
    "FetchTimeoutError",
    "IncompleteInputError",
    "KafkaClientError",
    "KafkaDirectError",
    "NotAuthorizedError",
    "OffsetConflictError",
    "OffsetsUnavailableError",
    "ReceiverFailedError",
    "SinkColumnError",
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
        # The one place option values enter messages: what may not be shown is never kept.
        safe = _shown(option, value)
        if safe is not value and isinstance(value, str) and value.strip():
            expected = _scrub(expected, value, safe)
            fix = _scrub(fix, value, safe) if fix else fix
        self.option = option
        self.value = safe
        self.expected = expected
        self.fix = fix
        shown = "<not set>" if safe is None else repr(safe)
        message = f"Invalid option '{option}': got {shown}, expected {expected}."
        if fix:
            message += f" {fix}"
        super().__init__(message)


def _scrub(text: str, value: str, replacement: object) -> str:
    # librdkafka quotes a refused value in its own message ('Invalid value "..." for ...').
    # The same scrubber as for librdkafka's log lines (kafka.logs), so both decide alike.
    return Scrubber([value], replacement)(text)


class UnsupportedKafkaOptionError(ConfigurationError):
    """A ``kafka.*`` option that the library manages itself, e.g. ``kafka.auto.offset.reset``
    on the source or ``kafka.value.serializer`` on the sink. ``owner`` says which."""

    def __init__(
        self, option: str, value: object, replacement: str, *, owner: str = "source"
    ) -> None:
        super().__init__(
            option,
            value,
            f"this Kafka option not to be set, because the {owner} manages it",
            replacement,
        )


class SinkColumnError(ConfigurationError):
    """A column the sink writes is missing, ambiguous or of a type it cannot write.

    Raised when Spark builds the writer, before anything is written. ``option`` is the column's
    name and ``value`` its type.
    """

    def __init__(self, column: str, value: object, expected: str, fix: str) -> None:
        self.option, self.value, self.expected, self.fix = column, value, expected, fix
        KafkaDirectError.__init__(self, f"{expected} {fix}")


class DataLossError(KafkaDirectError):
    """Offsets that should exist are gone: a topic was deleted, recreated, or aged out.

    Raised only with ``failOnDataLoss=true`` (the default). With ``failOnDataLoss=false`` the
    same condition is logged as a warning and the read skips to what is available.
    """

    #: The last sentence, per API: where its user turns ``failOnDataLoss`` off.
    FIXES: ClassVar[dict[str, str]] = {
        "source": "If you want the query to continue with what is available, set the source "
        "option 'failOnDataLoss' to 'false'.",
        "createDirectStream": "If you want the stream to continue with what is available, pass "
        "failOnDataLoss=False to KafkaUtils.createDirectStream.",
    }

    def __init__(
        self,
        topic: str,
        partition: int,
        detail: str,
        *,
        api: Literal["source", "createDirectStream"] = "source",
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.detail = detail
        self.api = api
        super().__init__(
            f"Data loss on {topic}-{partition}: {detail}. Some data may have been lost because "
            "it is no longer available in Kafka: the topic may have been deleted or recreated, or "
            f"the data aged out under the retention policy. {self.FIXES[api]}"
        )

    def raised_by(self, api: Literal["source", "createDirectStream"]) -> DataLossError:
        """The same error, its fix worded for ``api`` (a key of :attr:`FIXES`)."""
        return DataLossError(self.topic, self.partition, self.detail, api=api)


class OffsetConflictError(KafkaDirectError):
    """An offset store did not hold the offsets this batch starts from.

    Raised by the exactly-once recipe ("advance the stored offsets only where they still equal
    this batch's start"): the batch was already applied (a replay) or another writer moved the
    offsets (a concurrent run). The database transaction is rolled back, so nothing is applied
    twice.
    """

    def __init__(self, group: str, detail: str, *, fix: str | None = None) -> None:
        self.group = group
        # ``fix`` replaces the usual guess where the store knows the cause (a gap before the
        # batch, a commit to a group another process moved).
        super().__init__(
            f"Offsets of group '{group}' in the offset store conflict with this batch: {detail}. "
            + (
                fix
                or "The batch was not applied. It was probably applied already (a replay) or "
                "another process is writing the same group; run one writer per group."
            )
        )


class IncompleteInputError(KafkaDirectError):
    """A sink task's input ended before Spark finished sending it: an operator upstream of the
    sink failed in this task attempt (Spark reports that error as the task's cause). The task
    commits nothing; Spark's retry of the task writes its rows."""


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


class ReceiverFailedError(KafkaDirectError):
    """A receiver of ``KafkaUtils.createStream`` died and was not restarted: retrying could not
    help (a setting librdkafka refuses, a denied ACL), or it kept dying."""

    def __init__(self, receiver: int, group: str, reason: str, times: int) -> None:
        self.receiver = receiver
        self.reason = reason
        super().__init__(
            f"Receiver {receiver} of group '{group}' died {times} time(s) in a row and was not "
            f"restarted: {reason}"
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


class NotAuthorizedError(KafkaClientError):
    """Kafka's authorizer refused an operation (``*_AUTHORIZATION_FAILED``): never retried.

    ``principal`` is the principal as the broker sees it (from the client's own settings, never
    a secret), ``operations`` what was refused (``READ``, ``WRITE``, ``IDEMPOTENT_WRITE``...),
    ``resource`` its kind (``topic``, ``group``, ``transactional id``, ``cluster``) and ``names``
    the resources (a transactional id is a prefix). The message carries a ``kafka-acls`` line.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        principal: str,
        operations: Sequence[str],
        resource: str,
        names: Sequence[str],
    ) -> None:
        super().__init__(message, code=code, retriable=False)
        self.principal = principal
        self.operations = tuple(operations)
        self.resource = resource
        self.names = tuple(names)


class OffsetsUnavailableError(KafkaClientError):
    """The cluster gave no valid offset for some partitions: their leader is down, slow or moving.

    ``offsets`` holds the valid answers of the same request, ``unavailable`` the reason for each
    partition without one. A stream does not advance those partitions in this trigger and asks
    again; a batch read retries, then fails with this error. An invalid answer (librdkafka's
    ``OFFSET_INVALID``, -1001, for a leader that did not answer in time) is never used as an
    offset.
    """

    def __init__(
        self,
        message: str,
        *,
        offsets: Mapping[Any, int],
        unavailable: Mapping[Any, str],
        code: str | None = None,
    ) -> None:
        super().__init__(message, code=code, retriable=True)
        self.offsets = dict(offsets)
        self.unavailable = dict(unavailable)


class FetchTimeoutError(KafkaClientError):
    """An executor waited ``kafkaConsumer.pollTimeoutMs`` without receiving an expected offset."""


class DeliveryError(KafkaClientError):
    """The sink's producer could not deliver a record: the write task fails with it.

    ``topic`` and ``partition`` say where the record was going (``partition`` is None when it
    had none assigned yet); ``code`` is librdkafka's error name.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str | None,
        partition: int | None,
        code: str | None = None,
        retriable: bool = False,
    ) -> None:
        super().__init__(message, code=code, retriable=retriable)
        self.topic = topic
        self.partition = partition


class EmbeddedBrokerError(KafkaDirectError):
    """The embedded broker (Tansu from the ``embedded`` extra) could not be started or stopped."""
