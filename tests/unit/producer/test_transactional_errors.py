"""Unit tests for how the exactly-once task's producer (kafka_direct.producer.transactional) says
and settles a fence: why it was fenced, and whether it is closed or dropped. No broker, no Spark:
a stand-in for confluent-kafka's Producer, and a clock the test moves."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import KafkaClientError
from kafka_direct.producer.transactional import TransactionalProducer

FENCED = KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)
TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Timed out", retriable=True)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Client:
    """confluent-kafka's Producer as a fenced one answers; records what is called."""

    def __init__(self, abort_error: KafkaError | None = FENCED) -> None:
        self.abort_error = abort_error
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        raise KafkaException(FENCED)

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)

    def purge(self, *args: bool) -> None:
        self.calls.append("purge")

    def poll(self, timeout: float) -> int:
        return 0

    def close(self) -> None:
        self.calls.append("close")


def _producer(client: _Client, clock: _Clock, timeout_ms: str = "5000") -> TransactionalProducer:
    config = {
        "bootstrap.servers": "127.0.0.1:9",
        "transactional.id": "q-0",
        "transaction.timeout.ms": timeout_ms,
        "log_level": "0",
    }
    producer = TransactionalProducer(config, clock=clock)
    producer._producer = client  # type: ignore[assignment]
    return producer


# seconds the transaction stayed open, phrase of the fenced commit's error
# Review: a transaction the coordinator aborted after kafka.transaction.timeout.ms was reported
# as "a newer attempt of this task ... took over", which sent users looking for a zombie.
FENCES = [
    (1.0, "a newer attempt of this task (or a newer run of the query) took over"),
    (5.0, "a newer attempt of this task (or a newer run of the query) took over"),
    (9.0, "its transaction had been open for 9.0 s, longer than kafka.transaction.timeout.ms=5000"),
]


@pytest.mark.parametrize(("open_s", "phrase"), FENCES)
def test_a_fence_after_the_transaction_timeout_says_the_coordinator_aborted(
    open_s: float, phrase: str
) -> None:
    clock, client = _Clock(), _Client()
    producer = _producer(client, clock)
    producer.begin_transaction()
    clock.now += open_s
    with pytest.raises(KafkaClientError) as info:
        producer.commit_transaction(1.0)
    message = str(info.value)
    assert info.value.code == "_FENCED"
    assert "transactional id 'q-0') failed while committing" in message
    assert phrase in message
    if open_s > 5:
        assert "so the transaction coordinator aborted it" in message
        assert "Raise kafka.transaction.timeout.ms (up to the brokers' " in message
        assert "transaction.max.timeout.ms" in message and "maxOffsetsPerTrigger" in message
        assert "took over" not in message
    producer.close()


def test_a_fenced_producer_is_closed_not_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """Review: the abort of a fenced producer returns the fence (fatal), and the producer was
    then dropped unclosed, logged as "its transaction's abort did not finish, and the
    coordinator will abort it", though what fenced it had aborted the transaction."""
    client = _Client(FENCED)
    producer = _producer(client, _Clock())
    with caplog.at_level(logging.DEBUG, logger="kafka_direct.producer.transactional"):
        producer.abort_transaction(1.0)
        producer.close()
    assert client.calls == ["abort", "purge", "close"]
    assert "is fenced: its open transaction was aborted by what fenced it" in caplog.text
    assert "Dropping the producer" not in caplog.text


def test_a_producer_whose_abort_did_not_finish_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The coordinator unreachable: confluent-kafka's close would abort again without a limit."""
    client = _Client(TIMED_OUT)
    producer = _producer(client, _Clock())
    with caplog.at_level(logging.INFO, logger="kafka_direct.producer.transactional"):
        producer.abort_transaction(1.0)
        producer.close()
    assert client.calls == ["abort", "purge"]
    assert "its transaction's abort did not finish, and the coordinator will abort it" in (
        caplog.text
    )
