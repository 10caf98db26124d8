"""The one place where confluent-kafka errors become kafka_direct errors. Plain library.

Used by the driver (admin calls) and executors (fetch). Every call into confluent-kafka that can
raise goes through :func:`kafka_errors`, so users only ever see :class:`KafkaDirectError`
subclasses with a sentence about what was being done.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import KafkaClientError, TopicNotFoundError

__all__ = ["kafka_errors", "raise_for_error", "translate"]

_NOT_FOUND = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}


def translate(error: KafkaError | KafkaException | BaseException, context: str) -> KafkaClientError:
    """Map a librdkafka error to our hierarchy; ``context`` says what we were doing."""
    if isinstance(error, (TimeoutError, FutureTimeout)):
        return KafkaClientError(f"{context}: timed out", code="_TIMED_OUT", retriable=True)
    kerr = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if isinstance(kerr, KafkaError):
        code = kerr.code()
        cls = TopicNotFoundError if code in _NOT_FOUND else KafkaClientError
        return cls(
            f"{context}: {kerr.str()} ({kerr.name()})",
            code=kerr.name(),
            retriable=bool(kerr.retriable()),
        )
    return KafkaClientError(f"{context}: {error}")


def raise_for_error(error: KafkaError | None, context: str) -> None:
    """Raise the translated error if librdkafka reported one (message or metadata error)."""
    if error is not None:
        raise translate(error, context)


@contextmanager
def kafka_errors(context: str) -> Iterator[None]:
    """Translate any confluent-kafka exception raised inside the block."""
    try:
        yield
    except KafkaException as exc:
        raise translate(exc, context) from exc
