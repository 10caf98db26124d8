"""A rebalance served in the middle of a receiver's read (kafka_direct.dstream.receiver.loop and
.rebalance): a read takes several consume() calls (its byte budget), and librdkafka serves a
rebalance callback inside a call, after it has put records in that call's result.

A review found the records of a read's earlier calls invisible to the callbacks (so revoked
partitions' records were logged and committed late, and lost ones' kept), and a partition lost
and assigned again within one read logged as the range [100, 61): the driver's batch planning
then failed at every restart. Checked here with the fake consumer of test_receiver_loop, whose
``mid_call`` serves a rebalance after a call has taken some records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_direct.dstream.receiver.progress import merge_ranges
from kafka_direct.dstream.receiver.rebalance import split_at_rebalance
from kafka_direct.dstream.receiver.wal_log import BlockLog
from kafka_direct.errors import StreamStateError
from kafka_direct.offsets import OffsetRange
from tests.unit.dstream.test_receiver_loop import (
    FakeConsumer,
    FakeMessage,
    FakePartition,
    blocks,
    make_receiver,
    messages,
)

T0, T1 = FakePartition("t", 0), FakePartition("t", 1)


def on_call(consumer: FakeConsumer, n: int, rebalances: list[Any], then: Any = None) -> None:
    """Queue ``rebalances`` to be served at the start of the ``n``-th consume() call from now
    (and the new assignment's fetch, ``then``)."""
    original = consumer.consume
    calls = {"n": 0}

    def consume(num_messages: int, timeout: float) -> list[FakeMessage]:
        calls["n"] += 1
        if calls["n"] == n:
            consumer.rebalances += rebalances
            if then is not None:
                consumer.queue = then
        return original(num_messages, timeout)

    consumer.consume = consume  # type: ignore[method-assign]


def ranges(root: Path) -> list[tuple[tuple[str, int, int, int, int], ...]]:
    return [meta.ranges for meta in blocks(root)]


def test_a_revocation_in_a_reads_second_call_logs_and_commits_the_first_calls_records(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [T0, T1]))
    receiver.step()
    consumer.feed(messages(0, 0, 4) + messages(1, 0, 2))
    on_call(consumer, 2, [("revoke", [T0])])  # the first call of the read takes one record
    receiver.step()
    receiver.flush("test")
    # t-0@0 was logged and committed before t-0 went; the rest of t-0 is the next owner's.
    assert events == [
        ("assign-returned", "t-0,t-1"),
        ("commit", "t-0@1"),
        ("revoke-returned", "t-0"),
        ("commit", "t-1@2"),
    ]
    assert ranges(tmp_path) == [(("t", 0, 0, 1, 1),), (("t", 1, 0, 2, 2),)]


def test_a_lost_assignment_in_a_reads_second_call_drops_the_first_calls_records(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [T0, T1]))
    receiver.step()
    consumer.feed(messages(0, 0, 4) + messages(1, 0, 2))
    on_call(consumer, 2, [("lost", [T0])])
    receiver.step()
    receiver.flush("test")
    assert ("commit", "t-1@2") in events and not any("t-0@" in e[1] for e in events)
    assert ranges(tmp_path) == [(("t", 1, 0, 2, 2),)]


def test_a_partition_lost_and_back_within_one_read_never_logs_a_backward_range(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [T0]))
    receiver.step()
    consumer.feed(messages(0, 100, 4))
    # Back at once; its fetch restarts at the group's last commit, 50.
    on_call(consumer, 2, [("lost", [T0]), ("assign", [T0])], then=messages(0, 50, 11))
    receiver.step()
    receiver.flush("test")
    assert ranges(tmp_path) == [(("t", 0, 50, 61, 11),)]
    assert events[-1] == ("commit", "t-0@61")
    pending = BlockLog(str(tmp_path), "run-2", durable=True).pending()
    merged = merge_ranges(r for b in pending for r in b.meta.offset_ranges())
    assert merged == [OffsetRange("t", 0, 50, 61)]


@pytest.mark.parametrize(
    ("kind", "fetch", "expected"),
    [
        # Lost and back: the fetch restarts lower, at the group's last commit.
        pytest.param("lost", messages(0, 50, 6), (("t", 0, 50, 56, 6),), id="lost, lower"),
        # Revoked and back after another member committed further.
        pytest.param("revoke", messages(0, 200, 3), (("t", 0, 200, 203, 3),), id="revoke, higher"),
    ],
)
def test_records_a_call_handed_before_the_callback_inside_it_are_dropped(
    tmp_path: Path, kind: str, fetch: list[FakeMessage], expected: tuple[Any, ...]
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [T0]))
    receiver.step()
    consumer.feed(messages(0, 100, 2))
    # One call: 100 and 101 go into its result, then the callbacks run, then the new fetch.
    consumer.mid_call = (2, [(kind, [T0]), ("assign", [T0])], fetch)
    receiver._consume(50, 0.1)
    receiver._take_read()
    receiver.flush("test")
    assert ranges(tmp_path) == [expected]
    assert events[-1] == ("commit", f"t-0@{expected[0][3]}")


def test_two_revocations_of_a_partition_in_one_call_restart_the_receiver(tmp_path: Path) -> None:
    receiver, consumer = make_receiver(tmp_path)
    consumer.rebalances.append(("assign", [T0]))
    receiver.step()
    consumer.feed(messages(0, 100, 2))
    consumer.mid_call = (1, [("lost", [T0]), ("assign", [T0]), ("lost", [T0])], None)
    with pytest.raises(StreamStateError, match="revoked twice within one consume"):
        receiver._consume(50, 0.1)


def m(partition: int, offset: int) -> FakeMessage:
    return FakeMessage("t", partition, offset, b"v")


@pytest.mark.parametrize(
    ("offsets", "cut", "assigned", "kept"),
    [
        pytest.param([100, 101, 50, 51], (99, 102), True, [50, 51], id="restart lower"),
        pytest.param([100, 101, 200], (99, 102), True, [200], id="restart higher"),
        pytest.param([50, 51], (103, 104), True, [50, 51], id="none before the callback"),
        pytest.param([104, 105], (103, 104), True, [104, 105], id="restart at the position"),
        pytest.param([100, 101], (99, 102), False, [], id="not assigned now"),
        pytest.param([100, 101], (99, -1001), True, [100, 101], id="no position: none before"),
        pytest.param([0, 1], (None, 2), True, [], id="first records of the assignment"),
    ],
)
def test_split_at_rebalance(
    offsets: list[int], cut: tuple[int | None, int], assigned: bool, kept: list[int]
) -> None:
    other = m(1, 7)  # a partition no rebalance touched
    given = [m(0, o) for o in offsets] + [other]
    mine = {("t", 0), ("t", 1)} if assigned else {("t", 1)}
    out, dropped = split_at_rebalance(given, {("t", 0): cut}, mine)
    assert [x.offset() for x in out if x.partition() == 0] == kept
    assert other in out
    assert dropped.get(("t", 0), 0) == len(offsets) - len(kept)


@pytest.mark.parametrize(
    ("adds", "expected"),
    [
        pytest.param([(0, 3), (4, 9)], [0, 10, 2], id="in order"),
        pytest.param([(100, 103), (50, 60)], [50, 104, 2], id="lower after higher"),
    ],
)
def test_a_blocks_range_runs_from_its_lowest_offset_to_past_its_highest(
    adds: list[tuple[int, int]], expected: list[int]
) -> None:
    from kafka_direct.dstream.receiver.loop import _Block
    from tests.unit.dstream.test_wal import batch

    block = _Block()
    for low, high in adds:
        block.add(("t", 0), batch(1, low), low, high)
    assert block.ranges[("t", 0)] == expected
