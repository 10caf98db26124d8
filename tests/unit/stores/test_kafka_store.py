"""KafkaGroupStore against a fake admin client: commits are compare-and-set (a second copy of a
stream is refused, not silently interleaved), a deleted topic's partition does not poison later
commits, and a stream does not start beside active members of its group. What real Kafka
answers is in tests/integration/test_group_commits.py."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.dstream.commit_queue import CommitQueue
from kafka_direct.errors import (
    ConfigurationError,
    KafkaClientError,
    NotAuthorizedError,
    OffsetConflictError,
)
from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.stores import KafkaGroupStore

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OLD0 = TopicPartition("old", 0)


def _done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(KafkaException(error))
    else:
        future.set_result(value)
    return future


def _answer(ck: CkTopicPartition, error: KafkaError | None) -> Any:
    """A partition of a commit's answer (confluent-kafka's TopicPartition.error is read-only)."""
    return SimpleNamespace(topic=ck.topic, partition=ck.partition, offset=ck.offset, error=error)


class FakeGroupAdmin:
    """One cluster's consumer groups: committed offsets, members, deleted topics."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        #: Each commit's metadata string, as Kafka keeps it beside the offset.
        self.metadata: dict[str, dict[TopicPartition, str]] = {}
        self.members: dict[str, list[Any]] = {}
        self.deleted_topics: set[str] = set()
        #: Commits that land in the group, then answer a timeout (the outcome is unknown).
        self.lost_answers = 0
        self.describe_error: KafkaError | None = None
        self.offset_fetches = 0

    def list_consumer_group_offsets(self, request: Any, **_: Any) -> dict[str, Future[Any]]:
        self.offset_fetches += 1
        group = request[0].group_id
        wanted: Iterable[Any] = request[0].topic_partitions or []
        held, notes = self.committed.get(group, {}), self.metadata.get(group, {})
        keys = [TopicPartition(ck.topic, ck.partition) for ck in wanted]
        parts = [
            CkTopicPartition(tp.topic, tp.partition, held.get(tp, -1001), notes.get(tp, ""))
            for tp in keys
        ]
        return {group: _done(SimpleNamespace(topic_partitions=parts))}

    def alter_consumer_group_offsets(
        self, request: list[ConsumerGroupTopicPartitions], **_: Any
    ) -> dict[str, Future[Any]]:
        group = request[0].group_id
        answers = []
        for ck in request[0].topic_partitions:
            error = None
            if ck.topic in self.deleted_topics:
                error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            else:
                tp = TopicPartition(ck.topic, ck.partition)
                self.committed.setdefault(group, {})[tp] = ck.offset
                self.metadata.setdefault(group, {})[tp] = ck.metadata or ""
            answers.append(_answer(ck, error))
        if self.lost_answers:
            self.lost_answers -= 1
            return {group: _done(error=KafkaError(KafkaError._TIMED_OUT))}
        return {group: _done(SimpleNamespace(topic_partitions=answers))}

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[Any]]:
        group = groups[0]
        if self.describe_error is not None:
            return {group: _done(error=self.describe_error)}
        return {group: _done(SimpleNamespace(members=self.members.get(group, [])))}


def store_on(admin: FakeGroupAdmin) -> KafkaGroupStore:
    store = KafkaGroupStore({"bootstrap.servers": "b:9092"})
    store._admin = admin
    return store


def test_a_second_copy_of_a_stream_is_refused_at_its_commit() -> None:
    # Regression (review): two copies of one app, neither a group member, both committed: the
    # group's offsets jumped back and forth and every record was read twice, silently.
    admin = FakeGroupAdmin()
    admin.committed["g"] = {T0: 100}
    first, second = store_on(admin), store_on(admin)
    assert first.load("g", [T0, T1]) == second.load("g", [T0, T1]) == {T0: 100}
    first.save("g", [OffsetRange("t", 0, 100, 150), OffsetRange("t", 1, 0, 7)])
    with pytest.raises(OffsetConflictError) as info:
        second.save("g", [OffsetRange("t", 0, 100, 160)])
    message = str(info.value)
    assert "group 'g'" in message
    assert f"t-0 is at 150 (committed by {first.writer}) in the group" in message
    assert "started from 100 (committed by a writer that names none)" in message
    assert "second copy" in message
    assert admin.committed["g"] == {T0: 150, T1: 7}  # nothing of the refused commit
    first.save("g", [OffsetRange("t", 0, 150, 200)])  # the first copy goes on
    assert admin.committed["g"][T0] == 200


def test_a_second_copy_is_refused_even_when_both_commit_the_same_offsets() -> None:
    # Copies in step (one started where the other had committed) commit equal offsets: the
    # writer's name in the commit's metadata still tells them apart.
    admin = FakeGroupAdmin()
    first = store_on(admin)
    first.load("g", [T0])
    first.save("g", [OffsetRange("t", 0, 0, 10)])
    second = store_on(admin)
    assert second.load("g", [T0]) == {T0: 10}  # starts where the first copy stands
    second.save("g", [OffsetRange("t", 0, 10, 15)])
    with pytest.raises(OffsetConflictError, match=f"by {second.writer}"):
        first.save("g", [OffsetRange("t", 0, 10, 15)])
    assert admin.metadata["g"][T0] == second.writer


def test_nothing_committed_yet_is_what_a_stream_that_found_nothing_expects() -> None:
    admin = FakeGroupAdmin()
    first, second = store_on(admin), store_on(admin)
    assert first.load("g", [T0]) == second.load("g", [T0]) == {}
    first.save("g", [OffsetRange("t", 0, 0, 10)])
    with pytest.raises(OffsetConflictError, match="where this stream last committed or started"):
        second.save("g", [OffsetRange("t", 0, 0, 12)])


def test_one_offset_fetch_per_commit_and_none_for_unknown_partitions() -> None:
    admin = FakeGroupAdmin()
    store = store_on(admin)
    store.save("g", [OffsetRange("t", 0, 0, 5)])  # never loaded: committed as given
    assert admin.offset_fetches == 0
    store.save("g", [OffsetRange("t", 0, 5, 9)])
    store.save("g", [OffsetRange("t", 0, 9, 9)])
    assert admin.offset_fetches == 2
    assert admin.committed["g"] == {T0: 9}


def test_a_commit_whose_answer_was_lost_is_not_taken_for_another_writer() -> None:
    admin = FakeGroupAdmin()
    store = store_on(admin)
    store.load("g", [T0])
    admin.lost_answers = 1
    with pytest.raises(KafkaClientError):
        store.save("g", [OffsetRange("t", 0, 0, 10)])  # landed, but answered a timeout
    assert admin.committed["g"] == {T0: 10}
    store.save("g", [OffsetRange("t", 0, 0, 20)])  # the queue retries with more ranges
    assert admin.committed["g"] == {T0: 20}


class Heard(list[tuple[dict[TopicPartition, int], Exception | None]]):
    def __call__(self, offsets: dict[TopicPartition, int], error: Exception | None) -> None:
        self.append((offsets, error))


def test_a_deleted_topic_is_dropped_from_the_commit_and_the_rest_is_committed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Regression (review): SubscribePattern over rotating topics with failOnDataLoss=False; the
    # deleted topic's range stayed queued and every later commit failed on it.
    admin = FakeGroupAdmin()
    store = store_on(admin)
    store.load("g", [T0, OLD0])
    admin.deleted_topics.add("old")
    queue, heard = CommitQueue(), Heard()
    queue.add([OffsetRange("t", 0, 0, 10), OffsetRange("old", 0, 5, 9)], heard)
    with caplog.at_level(logging.WARNING):
        assert queue.commit_all(store, "g") == {T0: 10, OLD0: 9}
        for i in range(1, 4):
            queue.add([OffsetRange("t", 0, 10 * i, 10 * (i + 1))], heard)
            assert queue.commit_all(store, "g") == {T0: 10 * (i + 1)}
    assert [error for _, error in heard] == [None] * 4
    assert admin.committed["g"] == {T0: 40}
    assert queue.drain() == []
    assert caplog.text.count("no longer has old-0") == 1  # said once


def test_other_per_partition_refusals_still_fail_the_commit() -> None:
    admin = FakeGroupAdmin()

    def refuse(request: Any, **_: Any) -> dict[str, Future[Any]]:
        ck = _answer(
            request[0].topic_partitions[0], KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE)
        )
        return {"g": _done(SimpleNamespace(topic_partitions=[ck]))}

    admin.alter_consumer_group_offsets = refuse  # type: ignore[method-assign]
    with pytest.raises(KafkaClientError, match="OFFSET_METADATA_TOO_LARGE"):
        store_on(admin).save("g", [OffsetRange("t", 0, 0, 1)])


def _member(client_id: str, host: str) -> Any:
    return SimpleNamespace(client_id=client_id, host=host, member_id=f"{client_id}-m")


def test_a_stream_does_not_start_beside_active_members_of_its_group() -> None:
    admin = FakeGroupAdmin()
    admin.members["g"] = [_member("console-consumer", "/10.0.0.7"), _member("etl-1", "/10.0.0.8")]
    with pytest.raises(ConfigurationError) as info:
        store_on(admin).attach_stream("g", fail_on_data_loss=True)
    message = str(info.value)
    assert info.value.option == "group.id"
    assert "it has 2: console-consumer on 10.0.0.7, etl-1 on 10.0.0.8" in message
    assert "group.id of its own" in message
    store_on(admin).attach_stream("other", fail_on_data_loss=True)  # no members: fine


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (KafkaError(KafkaError.GROUP_ID_NOT_FOUND), None),  # the consumer protocol's "none"
        (KafkaError(KafkaError._TIMED_OUT), None),  # not known: each commit still checks
        (KafkaError(KafkaError._UNSUPPORTED_FEATURE), None),  # librdkafka's mock cluster
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), NotAuthorizedError),
    ],
)
def test_a_member_check_that_cannot_be_made(
    error: KafkaError, raised: type[Exception] | None
) -> None:
    admin = FakeGroupAdmin()
    admin.describe_error = error
    store = store_on(admin)
    if raised is None:
        store.attach_stream("g", fail_on_data_loss=True)
    else:
        with pytest.raises(raised):
            store.attach_stream("g", fail_on_data_loss=True)
