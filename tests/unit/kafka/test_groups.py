"""GroupCommitter: never raises, backs off after failures, redacts its config."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.groups import GroupCommitter, fetch_group_offsets
from kafka_direct.offsets import TopicPartition

TP = TopicPartition("t", 0)


class FakeAdmin:
    def __init__(self) -> None:
        self.fail = True
        self.calls = 0

    def alter_consumer_group_offsets(self, request: Any, request_timeout: float) -> Any:
        self.calls += 1
        if self.fail:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        future: Future[Any] = Future()
        result = type("R", (), {"topic_partitions": []})()
        future.set_result(result)
        return {request[0].group_id: future}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def committer(admin: FakeAdmin, clock: Clock) -> GroupCommitter:
    c = GroupCommitter({"bootstrap.servers": "x:1", "sasl.password": "hunter2"}, "g", clock=clock)
    c._admin = admin
    return c


def test_failures_back_off_instead_of_retrying_every_trigger(monkeypatch: Any) -> None:
    admin, clock = FakeAdmin(), Clock()
    c = committer(admin, clock)
    monkeypatch.setattr("kafka_direct.kafka.groups.new_admin_client", lambda kafka: admin)
    assert c.commit({TP: 5}) is False  # refused: logged, never raised
    assert c.commit({TP: 6}) is False and admin.calls == 1  # backing off: not even tried
    clock.now += 5.0
    assert c.commit({TP: 7}) is False and admin.calls == 2
    clock.now += 5.0
    assert c.commit({TP: 7}) is False and admin.calls == 2  # the pause doubled to 10 s
    clock.now += 5.0
    admin.fail = False
    assert c.commit({TP: 8}) is True and admin.calls == 3
    assert c.last_committed == {TP: 8} and c.failures == 0


def test_config_secrets_do_not_print() -> None:
    c = committer(FakeAdmin(), Clock())
    assert "hunter2" not in repr(c) and "hunter2" not in repr(c.kafka)


class LoadingCoordinatorAdmin:
    """Answers ``errors`` (librdkafka error codes) first, then the group's committed offset."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)
        self.calls = 0

    def list_consumer_group_offsets(self, request: Any, request_timeout: float) -> Any:
        from confluent_kafka import TopicPartition as CkTopicPartition

        self.calls += 1
        future: Future[Any] = Future()
        if self.errors:
            future.set_exception(KafkaException(KafkaError(self.errors.pop(0))))
        else:
            parts = [CkTopicPartition("t", 0, 7)]
            future.set_result(type("R", (), {"topic_partitions": parts})())
        return {request[0].group_id: future}


def test_a_loading_coordinator_is_waited_out(monkeypatch: Any) -> None:
    # A fresh Kafka cluster answers the first group request this way while it loads
    # __consumer_offsets; a moved coordinator answers NOT_COORDINATOR.
    monkeypatch.setattr("kafka_direct.kafka.groups._COORDINATOR_RETRY_S", 0.0)
    admin = LoadingCoordinatorAdmin(
        [KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR]
    )
    assert fetch_group_offsets({}, "g", admin=admin) == {TP: 7}
    assert admin.calls == 3


def test_other_group_errors_are_raised_at_once() -> None:
    admin = LoadingCoordinatorAdmin([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaClientError, match="GROUP_AUTHORIZATION_FAILED"):
        fetch_group_offsets({}, "g", admin=admin)
    assert admin.calls == 1
