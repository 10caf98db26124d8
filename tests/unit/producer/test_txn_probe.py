"""The exactly-once sink's driver-side check: a timeout on a cluster that can run transactions
is waited out (a coordinator moving while a broker restarts), a cluster that cannot fails at
the first timeout, and a refusal fails at once. Fakes stand in for the producer and the
cluster's metadata (the integration tests run it on real Kafka)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import KafkaClientError
from kafka_direct.producer.txn_probe import outlook, probe_transactions
from tests.unit.fakes import FakeClock


@pytest.mark.parametrize(
    ("brokers", "exists", "replication", "wait", "why"),
    [
        (3, True, None, True, ""),
        (1, True, 3, True, ""),  # the log exists: its coordinators come back
        (1, False, 3, False, "creating it needs 3 brokers"),
        (3, False, 3, True, ""),
        (2, False, 3, False, "where 2 answered"),
        (3, False, None, False, ""),  # not known: no reason to wait
    ],
)
def test_outlook(brokers: int, exists: bool, replication: int | None, wait: bool, why: str) -> None:
    got_wait, got_why = outlook(brokers, exists, replication)
    assert got_wait is wait
    assert why in got_why and bool(got_why) is bool(why)


TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for operation to finish")
DENIED = KafkaError(
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed"
)
BAD_TIMEOUT = KafkaError(KafkaError.INVALID_TRANSACTION_TIMEOUT, "Invalid transaction timeout")


class Producers:
    """Producers whose ``init_transactions`` fails with the given errors in turn, then starts;
    each one takes ``timeout`` on the clock."""

    def __init__(self, clock: FakeClock, errors: list[KafkaError]) -> None:
        self.clock, self.errors, self.made = clock, list(errors), 0

    def __call__(self, settings: dict[str, Any]) -> Producers:
        assert settings["transactional.id"] == "job-probe"
        self.made += 1
        return self

    def init_transactions(self, timeout: float) -> None:
        if self.errors:
            self.clock.advance(timeout)
            raise KafkaException(self.errors.pop(0))

    def close(self) -> None:
        pass


def _probe(errors: list[KafkaError], wait: tuple[bool, str]) -> tuple[Producers, list[int]]:
    clock = FakeClock()
    producers = Producers(clock, errors)
    looked: list[int] = []

    def look() -> tuple[bool, str]:
        looked.append(1)
        return wait

    probe_transactions(
        {"bootstrap.servers": "b:9092"}, "job", 10.0, look,
        wait_s=60.0, producer_factory=producers, clock=clock.monotonic,
    )  # fmt: skip
    return producers, looked


def test_a_timeout_on_a_cluster_that_can_run_transactions_is_waited_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression (the soak on three brokers): a driver restarted while the controller was
    down failed its query at the check, after 10 s, instead of waiting."""
    producers, looked = _probe([TIMED_OUT, TIMED_OUT], (True, ""))
    assert producers.made == 3 and len(looked) == 2
    assert "waited out, up to 60 s in all" in caplog.text


def test_the_wait_has_a_bound() -> None:
    with pytest.raises(KafkaClientError) as info:
        _probe([TIMED_OUT] * 10, (True, ""))
    assert "could not start on the cluster at 'b:9092' within 10 s" in str(info.value)


def test_a_cluster_that_cannot_run_transactions_fails_at_the_first_timeout() -> None:
    with pytest.raises(KafkaClientError) as info:
        _probe([TIMED_OUT, TIMED_OUT], (False, "creating it needs 3 brokers"))
    message = str(info.value)
    assert "creating it needs 3 brokers" in message
    assert "transaction.state.log.replication.factor" in message
    assert "Nothing was written" in message


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (DENIED, "transactional id"),
        (BAD_TIMEOUT, "Lower 'kafka.transaction.timeout.ms'"),
    ],
)
def test_a_refusal_fails_at_once_without_looking(error: KafkaError, says: str) -> None:
    with pytest.raises(KafkaClientError) as info:
        _probe([error, error], (True, ""))
    assert says in str(info.value)
