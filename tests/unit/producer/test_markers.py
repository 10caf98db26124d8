"""Unit tests for kafka_direct.producer.markers: the exactly-once sink's decisions, table-style.
No broker, no Spark."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.producer.markers import (
    Decision,
    Marker,
    MarkerMismatchError,
    ReplayMismatchError,
    TaskIdentity,
    TransactionSettings,
    check_prefix,
    check_replay,
    committed_elsewhere,
    decide,
    prefix_from_checkpoint,
    transactional_id,
)

TXN = "q-3"


STREAM = TaskIdentity(3, batch_id=7)
BATCH = TaskIdentity(3, write_id="w1")

# marker the id's group holds, task, decision
DECISIONS = [
    (None, STREAM, Decision.WRITE),
    (Marker(10, batch_id=6), STREAM, Decision.WRITE),
    (Marker(10, batch_id=0), STREAM, Decision.WRITE),
    (Marker(10, batch_id=7), STREAM, Decision.SKIP),
    (Marker(0, batch_id=7, attempt=2), STREAM, Decision.SKIP),
    (None, BATCH, Decision.WRITE),
    (Marker(10, write_id="w0"), BATCH, Decision.WRITE),
    (Marker(10, write_id="w1"), BATCH, Decision.SKIP),
    # A stream's marker under a batch write's id: another write, so this one writes.
    (Marker(10, batch_id=7), BATCH, Decision.WRITE),
]


@pytest.mark.parametrize(("marker", "task", "decision"), DECISIONS)
def test_decide(marker: Marker | None, task: TaskIdentity, decision: Decision) -> None:
    assert decide(marker, task, TXN) is decision


# A batch write that began at 1000 ms (its driver's clock).
W1 = TaskIdentity(3, write_id="w1", write_started_ms=1_000)

# marker, attempt, decision (None: refused)
# Review: two writes with one prefix; X's task 3 commits, then fails before reporting; Y (begun
# later) commits its marker on the same id; X's retry saw "another write" and wrote X's rows
# again. A retry that finds a write begun after its own now refuses.
WRITE_STARTS = [
    (Marker(10, write_id="w2", started_ms=2_000), 0, Decision.WRITE),
    (Marker(10, write_id="w2", started_ms=2_000), 1, None),
    (Marker(10, write_id="w0", started_ms=500), 1, Decision.WRITE),
    (Marker(10, write_id="w2"), 1, Decision.WRITE),  # a marker from before starts were kept
    (Marker(10, write_id="w1", started_ms=2_000), 1, Decision.SKIP),  # a re-run's own marker
    (Marker(10, batch_id=4), 1, Decision.WRITE),  # a stream's marker: no start
]


@pytest.mark.parametrize(("marker", "attempt", "decision"), WRITE_STARTS)
def test_a_retry_refuses_the_marker_of_a_write_begun_after_its_own(
    marker: Marker, attempt: int, decision: Decision | None
) -> None:
    if decision is not None:
        assert decide(marker, W1, TXN, attempt=attempt) is decision
        return
    with pytest.raises(MarkerMismatchError) as info:
        decide(marker, W1, TXN, attempt=attempt)
    message = str(info.value)
    assert "last committed by batch write w2, which began at 1970-01-01T00:00:02.000+00:00" in (
        message
    )
    assert "after this batch write w1, partition 3 (attempt 1) began at 1970-01-01T00:00:01" in (
        message
    )
    assert "give writes that may run together a 'transactionalIdPrefix' each" in message


# markers on other topics, task, the topic whose marker shows the work committed (None: write)
# Review: a query stopped with some tasks of a micro-batch committed, restarted with another
# transactionMarkerTopic, read no marker and wrote those tasks again.
ELSEWHERE = [
    ({}, STREAM, None),
    ({"old": Marker(10, batch_id=6)}, STREAM, None),
    ({"old": Marker(10, batch_id=7)}, STREAM, "old"),
    ({"a": Marker(1, batch_id=2), "old": Marker(10, batch_id=7)}, STREAM, "old"),
    ({"old": Marker(10, write_id="w0")}, BATCH, None),
    ({"old": Marker(10, write_id="w1")}, BATCH, "old"),
]


@pytest.mark.parametrize(("found", "task", "topic"), ELSEWHERE)
def test_a_marker_on_another_topic_for_this_work_is_found(
    found: dict[str, Marker], task: TaskIdentity, topic: str | None
) -> None:
    expected = None if topic is None else (topic, found[topic])
    assert committed_elsewhere(found, task, TXN) == expected


def test_a_marker_of_another_query_on_another_topic_is_refused() -> None:
    with pytest.raises(MarkerMismatchError, match="already committed micro-batch 8, later than"):
        committed_elsewhere({"old": Marker(10, batch_id=8)}, STREAM, TXN)


# marker, task, phrase of the refusal
MISMATCHES = [
    (Marker(10, batch_id=8), STREAM, "already committed micro-batch 8, later than this"),
    (Marker(10, batch_id=8), STREAM, "Give this query a 'transactionalIdPrefix' of its own"),
    (Marker(10, write_id="w0"), STREAM, "was last used by a batch write (w0)"),
]


@pytest.mark.parametrize(("marker", "task", "phrase"), MISMATCHES)
def test_markers_of_another_query_are_refused(
    marker: Marker, task: TaskIdentity, phrase: str
) -> None:
    with pytest.raises(MarkerMismatchError) as info:
        decide(marker, task, TXN)
    assert phrase in str(info.value) and f"'{TXN}'" in str(info.value)
    assert isinstance(info.value, KafkaDirectError)


def test_a_replay_must_hold_the_committed_rows() -> None:
    check_replay(Marker(10, batch_id=7), STREAM, 10, TXN)
    with pytest.raises(ReplayMismatchError) as info:
        check_replay(Marker(10, batch_id=7, attempt=2), STREAM, 12, TXN)
    message = str(info.value)
    assert "micro-batch 7, partition 3 was committed before, by attempt 2 of that" in message
    assert "task, with 10 record(s)" in message
    assert "this replay holds 12 row(s)" in message
    assert "plan, its partitioning or its input changed" in message
    # What must stay the same across a restart, named (review: a repacked replay).
    assert "the same partitioning of its source (minPartitions, maxRecordsPerPartition" in message
    # current_timestamp() is not nondeterministic on a replay: a stream takes it from the
    # micro-batch's timestamp in the offset log (review).
    assert "(rand() or uuid() in a written column)" in message
    assert "current_timestamp" not in message


# marker digest, replay digest: a replay with the committed count passes unless both digests are
# known and differ (a marker from before digests, or a caller without one: count only).
# A digest is "scheme:hex"; a marker's digest of another scheme (or none: an order-sensitive
# digest of a development build) is not comparable.
SAME_COUNT = [
    ("s:aa", "s:aa", True),
    ("s:aa", "s:bb", False),
    (None, "s:bb", True),
    ("s:aa", None, True),
    ("aa", "s:bb", True),
    ("t:aa", "s:bb", True),
]


@pytest.mark.parametrize(("committed", "replayed", "passes"), SAME_COUNT)
def test_a_replay_with_the_committed_count_must_hold_the_committed_rows(
    committed: str | None, replayed: str | None, passes: bool
) -> None:
    marker = Marker(10, batch_id=7, attempt=1, digest=committed)
    if passes:
        check_replay(marker, STREAM, 10, TXN, replayed)
        return
    with pytest.raises(ReplayMismatchError) as info:
        check_replay(marker, STREAM, 10, TXN, replayed)
    message = str(info.value)
    assert "The micro-batch 7, partition 3 was committed before, by attempt 1" in message
    assert "this replay holds as many rows but other ones (their digest is s:bb, the" in message
    assert "committed rows' s:aa)" in message and f"'{TXN}'" in message


def test_a_marker_from_before_digests_reads_as_count_only() -> None:
    old = '{"attempt":0,"batch":7,"records":10,"v":1}'
    assert Marker.decode(old) == Marker(10, batch_id=7)
    assert Marker.decode(old).digest is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "marker",
    [
        Marker(10, batch_id=7),
        Marker(0, batch_id=0, attempt=3),
        Marker(5, write_id="0123abcd"),
        Marker(5, batch_id=3, digest="00ff" * 8),
        Marker(5, write_id="0123abcd", digest="s:00", started_ms=1_764_000_000_000),
    ],
)
def test_markers_round_trip_through_offset_metadata(marker: Marker) -> None:
    text = marker.encode()
    assert len(text) < 200  # far below the brokers' offset.metadata.max.bytes (4096)
    assert Marker.decode(text) == marker


@pytest.mark.parametrize("metadata", [None, "", "not json", "[1]", '{"records": 1}'])
def test_metadata_that_is_not_a_marker_reads_as_none(metadata: str | None) -> None:
    assert Marker.decode(metadata) is None


def test_a_marker_of_another_format_version_is_refused_not_taken_for_none() -> None:
    # Read as "nothing committed", a newer release's marker made a downgraded worker write a
    # committed task again.
    with pytest.raises(MarkerMismatchError, match="format version 2"):
        Marker.decode('{"v": 2, "records": 1, "batch": 3}')


def test_offsets_show_progress() -> None:
    assert Marker(1, batch_id=0).offset() == 1
    assert Marker(1, batch_id=41).offset() == 42
    assert Marker(1, write_id="w").offset() == 1


def test_ids_and_prefixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert transactional_id("q", 12) == "q-12"
    a = prefix_from_checkpoint("/data/ck/q1")
    assert a == prefix_from_checkpoint("/data/ck/q1/") == prefix_from_checkpoint(" /data/ck/q1")
    assert a != prefix_from_checkpoint("/data/ck/q2")
    assert a.startswith("kafka-direct-") and check_prefix(a) == a
    assert (
        a
        == prefix_from_checkpoint("file:/data/ck/q1")
        == prefix_from_checkpoint("file:///data/ck/q1")
    )
    remote = prefix_from_checkpoint("s3a://bucket/ck/q1")
    assert remote != prefix_from_checkpoint("s3a://bucket/ck/q2")
    monkeypatch.chdir(tmp_path)
    assert prefix_from_checkpoint("ck") == prefix_from_checkpoint(os.path.join(tmp_path, "ck"))


@pytest.mark.parametrize("bad", ["", "a b", "q/1", "x" * 201, "é"])
def test_a_prefix_kafka_cannot_take_is_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_prefix(bad)
    assert "'transactionalIdPrefix'" in str(info.value)
    assert "A-Z a-z 0-9 . _ -" in str(info.value)


def test_settings_pickle_without_secrets_in_their_repr() -> None:
    settings = TransactionSettings(
        "q", "out", "w1", KafkaConfig({"bootstrap.servers": "b:1", "sasl.password": "hunter2"})
    )
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert "hunter2" not in repr(settings)


def test_an_abort_with_no_transaction_open_leaves_the_producer_to_close_normally() -> None:
    # Review: a task that failed before it began a transaction (init_transactions, its marker)
    # got _STATE from the abort, and its producer was then dropped unclosed as if a transaction
    # were left to the coordinator.
    from kafka_direct.producer.transactional import TransactionalProducer

    producer = TransactionalProducer(
        {"bootstrap.servers": "127.0.0.1:9", "transactional.id": "never-begun", "log_level": "0"}
    )
    producer.abort_transaction(1.0)
    assert producer._unsettled is False
    producer.close()
