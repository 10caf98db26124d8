"""The stream planner's offset lookups when a partition gives no answer: a deleted topic's
partition in a replayed batch, answered "unknown topic" or with no leader (librdkafka's
``_NOENT``) once the client's metadata has dropped the topic; and a new partition whose earliest
offset is slow to come. Against the in-memory cluster of ``fake_reader``; no broker, no Spark.

Regressions (review of the stream planning): a deleted topic answered with no leader was left
to the executors, who waited ``kafkaConsumer.pollTimeoutMs`` instead of the driver reporting it
through ``failOnDataLoss``; a new partition whose earliest offset did not come at once failed the
query at that trigger instead of being waited out within ``fetchOffset.unavailableTimeout``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kafka_direct.errors import DataLossError, KafkaClientError, OffsetsUnavailableError
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from tests.unit.fake_reader import FakeCluster
from tests.unit.planning.test_micro_batch import T0, T1, T2, MicroBatches, spans
from tests.unit.planning.test_micro_batch_faults import SLOW, Clock, patient

U0 = TopicPartition("u", 0)
NOENT = "Local: No leaders found (_NOENT)"


def _answer_badly(q: MicroBatches, tp: TopicPartition, shape: str, times: int = 10**9) -> list[int]:
    """Make the next ``times`` earliest-offset lookups that include ``tp`` fail as the real
    reader reports it: ``shape`` is a partial answer's reason for ``tp`` (``_NOENT``, no
    leader; ``SLOW``, OFFSET_INVALID), or the code of a whole request's retriable error. Returns
    the count of lookups still to fail (tests read it to see how often the planner asked)."""
    answers = q.reader.earliest
    left = [times]

    def earliest(tps: Any) -> PartitionOffsets:
        wanted = sorted(set(tps))
        if tp not in wanted or left[0] == 0:
            return answers(wanted)
        left[0] -= 1
        if shape in (NOENT, SLOW):
            others = answers([other for other in wanted if other != tp])
            raise OffsetsUnavailableError(
                f"no valid earliest offset for 1 partition(s) ({tp}: {shape})",
                offsets=others,
                unavailable={tp: shape},
                code="_NOENT" if shape == NOENT else "OFFSET_INVALID",
            )
        raise KafkaClientError(
            f"Listing earliest offsets of {tp}: ({shape})", code=shape, retriable=True
        )

    q.reader.earliest = earliest  # type: ignore[method-assign]
    return left


# --- a partition of a replayed batch whose topic was deleted (finding 1) --------------------------


def _replayed_batch(
    fail_on_data_loss: str, *, delete: bool
) -> tuple[MicroBatches, Clock, Any, Any]:
    """Batch 1 logged over t-0 [3, 5) and u-0 [4, 6) (the driver died before its commit); u
    deleted when ``delete``; a restart that replays batch 1."""
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    cluster.create_topic("u", records=4)
    options = {"subscribe": "t,u", "startingOffsets": "earliest"}
    options["failOnDataLoss"] = fail_on_data_loss
    first = MicroBatches(cluster, options)
    assert first.trigger() == [("t-0", 0, 3), ("u-0", 0, 4)]
    cluster.append("t", 0, 2)
    cluster.append("u", 0, 2)
    start, logged_end = first.start, first.latest()
    if delete:
        cluster.delete_topic("u")
    clock = Clock()
    return patient(cluster, options, clock), clock, start, logged_end


#: How the real reader answers for a deleted topic's partition: a retriable not-found error for
#: the whole request, or (once librdkafka's metadata lacks the topic) no leader in a partial one.
DELETED = ["UNKNOWN_TOPIC_OR_PART", NOENT]


@pytest.mark.parametrize("shape", DELETED)
def test_regression_a_replayed_partition_whose_topic_was_deleted_fails_on_the_driver(
    shape: str,
) -> None:
    # Regression: the no-leader answer left u-0 to the executors, which waited for a leader that
    # never comes; Spark's executors report the deleted partition through failOnDataLoss.
    q, clock, start, end = _replayed_batch("true", delete=True)
    _answer_badly(q, U0, shape)
    with pytest.raises(DataLossError, match=r"u-0 is gone \(offset 4 was expected\)") as err:
        q.planner.plan_ranges(start, end)
    assert (err.value.topic, err.value.partition) == ("u", 0)
    assert clock.slept == []


@pytest.mark.parametrize("shape", DELETED)
def test_a_replayed_partition_whose_topic_was_deleted_is_dropped_without_fail(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    q, clock, start, end = _replayed_batch("false", delete=True)
    _answer_badly(q, U0, shape)
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.micro_batch"):
        assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 5)]
    warned = [r.getMessage() for r in caplog.records if "Data loss on u-0" in r.getMessage()]
    assert len(warned) == 1 and "u-0 is gone (offset 4 was expected)" in warned[0]
    assert q.planner.log_starts == {T0: 0}
    assert clock.slept == []


@pytest.mark.parametrize("shape", [NOENT, SLOW])
@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_replayed_partition_still_listed_but_unanswered_is_left_to_its_task(
    shape: str, fail_on_data_loss: str, caplog: pytest.LogCaptureFixture
) -> None:
    # u still exists; its leader gives no log start (moving, or not yet in the client's
    # metadata): not data loss. The batch in the offset log is planned as it was, and the task
    # waits for the leader when it reads, as it did before.
    q, clock, start, end = _replayed_batch(fail_on_data_loss, delete=False)
    _answer_badly(q, U0, shape)
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.micro_batch"):
        assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 5), ("u-0", 4, 6)]
    assert "Data loss" not in caplog.text
    assert q.planner.log_starts == {T0: 0}  # u-0's is not known: its task checks it
    assert clock.slept == []


def test_a_replayed_partition_without_a_log_start_is_not_called_gone_without_a_listing() -> None:
    # A restart whose first lookups find the metadata unreachable as well: whether u-0 is gone
    # cannot be told, so it is not reported lost on a guess; its task checks it when it reads.
    q, clock, start, end = _replayed_batch("true", delete=True)
    _answer_badly(q, U0, NOENT)
    q.reader.cluster.metadata_down = True
    assert spans(q.planner.plan_ranges(start, end)) == [("t-0", 3, 5), ("u-0", 4, 6)]
    assert clock.slept == []


# --- a new partition's earliest offset (finding 2) ------------------------------------------------


def _partition_added(options: dict[str, str] | None = None) -> tuple[MicroBatches, Clock]:
    """A stream past batch 0 over t-0 and t-1; then t-2 added with 4 records, 1 more on t-0."""
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[5, 5])
    clock = Clock()
    q = patient(
        cluster, {"subscribe": "t", "startingOffsets": "earliest", **(options or {})}, clock
    )
    assert q.trigger() == [("t-0", 0, 5), ("t-1", 0, 5)]
    cluster.add_partitions("t")
    cluster.append("t", 2, 4)
    cluster.append("t", 0, 1)
    return q, clock


#: A new partition's earliest offset not given: no leader yet or a slow one in a partial answer,
#: or the whole request failing (the leader not knowing the new partition yet; the cluster down).
UNANSWERED = [NOENT, SLOW, "UNKNOWN_TOPIC_OR_PART", "_TRANSPORT"]


@pytest.mark.parametrize("shape", UNANSWERED)
def test_regression_a_new_partition_without_its_earliest_offset_joins_a_later_batch(
    shape: str,
) -> None:
    # Regression: the lookup's error failed the query at this trigger.
    q, clock = _partition_added()
    left = _answer_badly(q, T2, shape, times=2)
    assert q.trigger() == [("t-0", 5, 6)]  # t-2 is left out; the others advance
    assert q.start == {T0: 6, T1: 5}
    assert q.trigger() is None  # still no answer: still new, nothing else to read
    assert left == [0]
    assert q.trigger() == [("t-2", 0, 4)]  # answered: from its earliest offset, nothing lost
    assert clock.slept == []  # a trigger never blocks on it
    assert q.planner.losses.lost == {}


@pytest.mark.parametrize("shape", UNANSWERED)
def test_a_new_partition_without_its_earliest_offset_fails_the_stream_after_the_bound(
    shape: str,
) -> None:
    q, clock = _partition_added({"fetchOffset.unavailableTimeout": "2m"})
    _answer_badly(q, T2, shape)
    assert q.trigger() == [("t-0", 5, 6)]
    clock.now += 119
    assert q.trigger() is None
    clock.now += 2
    with pytest.raises(KafkaClientError) as info:
        q.trigger()
    message = str(info.value)
    assert "t-2" in message and "'fetchOffset.unavailableTimeout' (120 s)" in message
    assert info.value.retriable is False


def test_a_new_partition_that_answers_again_is_said_to(caplog: pytest.LogCaptureFixture) -> None:
    # Its wait is over: reported, and forgotten (a topic recreated later starts a wait afresh).
    q, clock = _partition_added({"fetchOffset.unavailableTimeout": "2m"})
    _answer_badly(q, T2, SLOW, times=1)
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.patience"):
        assert q.trigger() == [("t-0", 5, 6)]
        clock.now += 100
        assert q.trigger() == [("t-2", 0, 4)]
    said = [r.getMessage() for r in caplog.records]
    assert any("no valid offset for 1 partition(s)" in m and "t-2" in m for m in said)
    assert any("t-2 answers again after 100 s" in m for m in said)


def test_a_new_partition_whose_lookup_is_refused_fails_at_once() -> None:
    # Not an outage: an error that cannot pass (here authorization) is not waited out.
    q, clock = _partition_added()
    answers = q.reader.earliest

    def earliest(tps: Any) -> PartitionOffsets:
        if T2 in set(tps):
            raise KafkaClientError("Listing offsets: (TOPIC_AUTHORIZATION_FAILED)", retriable=False)
        return answers(tps)

    q.reader.earliest = earliest  # type: ignore[method-assign]
    with pytest.raises(KafkaClientError, match="TOPIC_AUTHORIZATION_FAILED"):
        q.trigger()
    assert clock.slept == []


def test_a_new_partition_under_available_now_is_waited_for() -> None:
    # Under Trigger.AvailableNow a trigger that leaves the new partition out and finds nothing
    # else would end the run with it unread: the trigger waits for it instead (same bound).
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=3, records=[6, 5, 4])
    clock = Clock()
    q = patient(cluster, {"subscribe": "t", "startingOffsets": "earliest"}, clock)
    q.planner.prepare_available_now()
    q.start = {T0: 6, T1: 5}  # the checkpoint, from before t-2 was added
    left = _answer_badly(q, T2, SLOW, times=2)
    assert q.latest() == {T0: 6, T1: 5, T2: 4}
    assert left == [0] and len(clock.slept) == 2


def test_a_new_topic_deleted_before_its_earliest_offset_came_is_not_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Listed by the trigger's discovery, deleted before its earliest offset was asked: no
    # leader, and no longer listed. Not waited for: the next trigger does not find it at all.
    cluster = FakeCluster()
    cluster.create_topic("t", records=3)
    clock = Clock()
    q = patient(cluster, {"subscribePattern": "[tu]", "startingOffsets": "earliest"}, clock)
    assert q.trigger() == [("t-0", 0, 3)]
    cluster.create_topic("u", records=4)
    cluster.append("t", 0, 1)
    answers = q.reader.earliest

    def earliest(tps: Any) -> PartitionOffsets:
        if U0 in set(tps):
            cluster.delete_topic("u")
            raise OffsetsUnavailableError(
                "no valid earliest offset for 1 partition(s)",
                offsets=answers([tp for tp in tps if tp != U0]),
                unavailable={U0: NOENT},
                code="_NOENT",
            )
        return answers(tps)

    q.reader.earliest = earliest  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="kafka_direct.planning.patience"):
        assert q.trigger() == [("t-0", 3, 4)]
    assert "no valid offset" not in caplog.text
    assert q.planner.losses.lost == {}
