"""A share receiver's loop (kafka_direct.dstream.receiver.share_loop) around a fake share
consumer: acknowledged only after the block is durable, never when logging fails, poison records
released then rejected and named, records held past their lock not logged, refused
acknowledgements counted; and createShareStream's argument checks.

No broker, no Spark: blocks are written to tmp_path; a fake clock decides what time it is.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.config.share import check_lock_budget, share_stream_config
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.dstream.receiver.loop import ReceiverSpec
from kafka_direct.dstream.receiver.share_loop import AckTypes, ShareReceiver
from kafka_direct.dstream.receiver.wal import BlockWriter, FileSystem, block_meta, read_block
from kafka_direct.errors import ConfigurationError

PARAMS = {"bootstrap.servers": "b:9092", "group.id": "q"}
ACKS = AckTypes("ACCEPT", "RELEASE", "REJECT")


class Msg:
    def __init__(self, offset: int, value: bytes, count: int = 1, partition: int = 0) -> None:
        self._o, self._v, self._c, self._p = offset, value, count, partition

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes:
        return self._v

    def __len__(self) -> int:
        return len(self._v)

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> None:
        return None

    def error(self) -> None:
        return None

    def delivery_count(self) -> int:
        return self._c


class Events(FileSystem):
    """Records the log's file operations and the consumer's acknowledgements in one list."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def sync_file(self, handle: Any) -> None:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.calls.append("fsync")
        super().sync_file(handle)

    def sync_dir(self, path: str) -> None:
        self.calls.append("fsync dir")
        super().sync_dir(path)


class FakeShareConsumer:
    def __init__(self, events: Events) -> None:
        self.events = events
        self.acks: list[tuple[int, str]] = []
        self.commits = 0
        self.callback: Any = None
        #: The client refuses acknowledgements of these offsets (it knows their lock expired).
        self.refuse: set[int] = set()

    def acknowledge(self, message: Msg, kind: str) -> None:
        if message.offset() in self.refuse:
            raise RuntimeError("record not in flight")
        self.events.calls.append(f"{kind} {message.offset()}")
        self.acks.append((message.offset(), kind))

    def commit_sync(self, _timeout: float) -> dict[Any, Any]:
        self.commits += 1
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def receiver(
    tmp_path: Path, *, fail: bool = False, check: Any = None, lock_s: float = 30.0, **kw: Any
) -> tuple[ShareReceiver, FakeShareConsumer, Clock, list[dict[str, Any]]]:
    config = share_stream_config(
        PARAMS,
        ["t"],
        batch_interval=1.0,
        num_receivers=1,
        wal_dir=str(tmp_path),
        max_pending_blocks=None,
        include_headers=False,
        max_delivery_attempts=kw.get("attempts", 3),
        record_check=check,
        ack_commit_interval=kw.get("interval", 1.0),
        retained_batches=10,
    )
    import dataclasses

    config = dataclasses.replace(
        config, lock_duration_s=lock_s, delivery_count_limit=kw.get("limit", 5)
    )
    events = Events(fail)
    consumer = FakeShareConsumer(events)
    clock = Clock()
    named: list[dict[str, Any]] = []
    rcv = ShareReceiver(
        ReceiverSpec(config, str(tmp_path), "run1", 0, 0, 60.0),
        consumer,
        BlockWriter(str(tmp_path), "run1", durable=True, schema=ARROW_SCHEMA, fs=events),
        signals=None,  # type: ignore[arg-type]
        acks=ACKS,
        clock=clock,
        report=lambda _status: None,
        name_rejected=named.append,
    )
    return rcv, consumer, clock, named


def blocks(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "blocks").glob("*.arrow"))


def test_records_are_accepted_only_after_their_block_is_durable(tmp_path: Path) -> None:
    rcv, consumer, _clock, _ = receiver(tmp_path)
    rcv.take([Msg(0, b"a"), Msg(1, b"b", count=2), Msg(5, b"c")], polled=100.0)
    calls = consumer.events.calls
    assert calls == ["fsync", "fsync dir", "ACCEPT 0", "ACCEPT 1", "ACCEPT 5"]
    [block] = blocks(tmp_path)
    meta = block_meta(str(block))
    assert (meta.records, meta.redelivered, meta.ranges) == (3, 1, (("t", 0, 0, 6, 3),))
    values = [
        v.as_py() for b in read_block(str(tmp_path), f"blocks/{block.name}") for v in b.column(1)
    ]
    assert values == [b"a", b"b", b"c"]
    assert (rcv.status.records, rcv.status.redelivered) == (3, 1)


def test_nothing_is_accepted_when_the_block_cannot_be_logged(tmp_path: Path) -> None:
    rcv, consumer, _clock, _ = receiver(tmp_path, fail=True)
    with pytest.raises(OSError, match="No space left"):
        rcv.take([Msg(0, b"a"), Msg(1, b"b")], polled=100.0)
    assert consumer.acks == []  # held, never accepted: the group delivers them again
    assert blocks(tmp_path) == []


def test_a_refused_record_is_released_then_rejected_on_its_last_delivery_and_named(
    tmp_path: Path,
) -> None:
    def check(record: Any) -> None:
        if record.value == b"bad":
            raise ValueError("cannot parse")

    rcv, consumer, _clock, named = receiver(tmp_path, check=check, attempts=3)
    rcv.take([Msg(7, b"bad", count=1), Msg(8, b"ok")], polled=100.0)
    rcv.take([Msg(7, b"bad", count=2)], polled=100.0)
    rcv.take([Msg(7, b"bad", count=3), Msg(9, b"ok2")], polled=100.0)
    assert consumer.acks == [
        (7, "RELEASE"),
        (8, "ACCEPT"),
        (7, "RELEASE"),
        (7, "REJECT"),
        (9, "ACCEPT"),
    ]
    assert named == [
        {
            "topic": "t",
            "partition": 0,
            "offset": 7,
            "delivery_count": 3,
            "reason": "recordCheck raised ValueError: cannot parse",
            "receiver": 0,
        }
    ]
    assert (rcv.status.released, rcv.status.rejected, rcv.status.records) == (2, 1, 2)


def test_a_record_delivered_more_than_max_attempts_is_rejected_unseen(tmp_path: Path) -> None:
    seen: list[int] = []
    rcv, consumer, _clock, named = receiver(
        tmp_path, check=lambda r: seen.append(r.offset), attempts=3
    )
    rcv.take([Msg(4, b"killer", count=4), Msg(5, b"fine", count=1)], polled=100.0)
    assert seen == [5]  # the check never runs on it again: it killed every earlier holder
    assert consumer.acks == [(4, "REJECT"), (5, "ACCEPT")]
    assert named[0]["delivery_count"] == 4
    assert "its holder died, or its lock expired before the record was logged" in named[0]["reason"]


def test_records_held_past_their_lock_are_not_logged_and_the_stream_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock_box: list[Clock] = []

    def slow(_record: Any) -> None:
        clock_box[0].now += 6.0  # each check takes 6 s of a 10 s lock

    rcv, consumer, clock, _ = receiver(tmp_path, check=slow, lock_s=10.0)
    clock_box.append(clock)
    with caplog.at_level(logging.WARNING):
        rcv.take([Msg(0, b"a"), Msg(1, b"b")], polled=clock.now)
    assert blocks(tmp_path) == []  # handed on by the broker already: logging it makes a repeat
    assert consumer.acks == [(0, "RELEASE"), (1, "RELEASE")]
    assert rcv.status.lock_expired == 2
    assert "share.record.lock.duration.ms (now 10000 ms" in caplog.text


def test_acknowledgements_are_flushed_at_the_commit_interval(tmp_path: Path) -> None:
    rcv, consumer, clock, _ = receiver(tmp_path, interval=1.0)
    rcv.take([Msg(0, b"a")], polled=clock.now)
    rcv.flush_acks()
    assert consumer.commits == 0  # they travel with the next poll meanwhile
    clock.now += 1.0
    rcv.flush_acks()
    assert consumer.commits == 1
    clock.now += 5.0
    rcv.flush_acks()
    assert consumer.commits == 1  # nothing new to send


def test_refused_acknowledgements_are_counted_and_name_the_lock_setting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rcv, _consumer, _clock, _ = receiver(tmp_path)

    class TP:
        topic, partition = "t", 0

    rcv.take([Msg(o, b"v") for o in range(1, 6)], polled=100.0)
    rcv.on_acknowledged({TP(): {1, 2}}, None)
    with caplog.at_level(logging.WARNING):
        rcv.on_acknowledged({TP(): {3, 4, 5}}, "INVALID_RECORD_STATE")
    assert (rcv.status.acked, rcv.status.ack_failures, rcv.status.accept_refused) == (2, 3, 3)
    assert "share.record.lock.duration.ms" in caplog.text and "not a loss" in caplog.text


def test_refused_releases_of_records_held_past_their_lock_are_not_repeats(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock_box: list[Clock] = []

    def slow(_record: Any) -> None:
        clock_box[0].now += 6.0

    rcv, _consumer, clock, _ = receiver(tmp_path, check=slow, lock_s=10.0)
    clock_box.append(clock)

    class TP:
        topic, partition = "t", 0

    rcv.take([Msg(0, b"a"), Msg(1, b"b")], polled=clock.now)  # expired: released, not logged
    caplog.clear()
    with caplog.at_level(logging.INFO):
        rcv.on_acknowledged({TP(): {0, 1}}, "INVALID_RECORD_STATE")
    assert (rcv.status.ack_failures, rcv.status.accept_refused) == (2, 0)
    assert "were not logged" in caplog.text and "a repeat" not in caplog.text


@pytest.mark.parametrize(
    ("change", "name", "expected"),
    [
        ({"params": {**PARAMS, "auto.offset.reset": "earliest"}}, "auto.offset.reset", "share"),
        ({"params": {**PARAMS, "enable.auto.commit": "true"}}, "enable.auto.commit", "share"),
        ({"params": {"bootstrap.servers": "b:9092"}}, "group.id", "share group"),
        ({"max_delivery_attempts": 0}, "maxDeliveryAttempts", "integer >= 1"),
        ({"record_check": "not callable"}, "recordCheck", "function"),
        ({"ack_commit_interval": 0}, "ackCommitInterval", "> 0"),
        ({"wal_dir": None}, "walDir", "directory"),
    ],
)
def test_bad_arguments_name_the_argument(change: dict[str, Any], name: str, expected: str) -> None:
    args: dict[str, Any] = {
        "params": PARAMS,
        "batch_interval": 1.0,
        "num_receivers": 2,
        "wal_dir": "/tmp/wal",
        "max_pending_blocks": None,
        "include_headers": False,
        "max_delivery_attempts": 5,
        "record_check": None,
        "ack_commit_interval": 1.0,
        "retained_batches": 10,
        **change,
    }
    params = args.pop("params")
    with pytest.raises(ConfigurationError) as info:
        share_stream_config(params, ["t"], **args)
    assert name in str(info.value) and expected in str(info.value)


def test_the_ack_interval_must_sit_well_inside_the_lock() -> None:
    config = share_stream_config(
        PARAMS,
        ["t"],
        batch_interval=1.0,
        num_receivers=1,
        wal_dir="/tmp/wal",
        max_pending_blocks=None,
        include_headers=False,
        max_delivery_attempts=5,
        record_check=None,
        ack_commit_interval=5.0,
        retained_batches=10,
    )
    check_lock_budget(config, 30.0)
    with pytest.raises(ConfigurationError, match=r"share\.record\.lock\.duration\.ms"):
        check_lock_budget(config, 15.0)


def test_a_lost_lock_is_warned_about_even_right_after_a_slow_poll_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock_box: list[Clock] = []
    cost = {b"slow": 6.0, b"late": 11.0}

    def check(record: Any) -> None:
        clock_box[0].now += cost.get(record.value, 0.0)

    rcv, _consumer, clock, _ = receiver(tmp_path, check=check, lock_s=10.0)
    clock_box.append(clock)
    with caplog.at_level(logging.WARNING):
        rcv.take([Msg(0, b"slow")], polled=clock.now)  # 6 s of 10: logged, and warned
        rcv.take([Msg(1, b"late")], polled=clock.now)  # 11 s of 10: lost, warned again
    assert "more than half the lock" in caplog.text
    assert "past their lock: they were not logged" in caplog.text
    assert (rcv.status.records, rcv.status.lock_expired) == (1, 1)


# -- a record held past its lock on its last delivery -------------------------------------------


@pytest.mark.parametrize(
    ("count", "attempts", "limit", "acks", "logged", "expired"),
    [
        # The group's last delivery: the broker archives it when the lock expires, so the
        # receiver logs it anyway (a review found it released, archived and never named).
        pytest.param(5, 5, 5, [(7, "ACCEPT")], 1, 0, id="last delivery, defaults"),
        pytest.param(5, 7, 5, [(7, "ACCEPT")], 1, 0, id="the group's limit below attempts"),
        # Not the group's last: released, delivered again (and rejected unseen, named, if it is
        # past maxDeliveryAttempts then).
        pytest.param(4, 5, 5, [(7, "RELEASE")], 0, 1, id="the group delivers it again"),
        pytest.param(3, 3, 5, [(7, "RELEASE")], 0, 1, id="past attempts, below the limit"),
    ],
)
def test_a_record_held_past_its_lock_on_the_groups_last_delivery_is_logged_anyway(
    tmp_path: Path,
    count: int,
    attempts: int,
    limit: int,
    acks: list[tuple[int, str]],
    logged: int,
    expired: int,
) -> None:
    clock_box: list[Clock] = []

    def slow(_record: Any) -> None:
        clock_box[0].now += 31.0  # recordCheck slower than a 30 s lock

    rcv, consumer, clock, named = receiver(
        tmp_path, check=slow, attempts=attempts, limit=limit, lock_s=30.0
    )
    clock_box.append(clock)
    rcv.take([Msg(7, b"v", count=count)], polled=clock.now)
    assert consumer.acks == acks
    assert named == []
    assert (rcv.status.records, rcv.status.logged_late) == (logged, logged)
    assert rcv.status.lock_expired == expired
    assert len(blocks(tmp_path)) == logged


def test_a_late_last_delivery_whose_accept_is_refused_counts_as_a_possible_repeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock_box: list[Clock] = []

    def slow(_record: Any) -> None:
        clock_box[0].now += 31.0

    class TP:
        topic, partition = "t", 0

    rcv, consumer, clock, _ = receiver(tmp_path, check=slow, attempts=5, limit=5)
    clock_box.append(clock)
    with caplog.at_level(logging.WARNING):
        rcv.take([Msg(7, b"v", count=5)], polled=clock.now)
    assert "share.delivery.count.limit=5): the broker archives them" in caplog.text
    rcv.on_acknowledged({TP(): {7}}, "INVALID_RECORD_STATE")  # the broker archived it first
    consumer.refuse = {8}  # the client itself refuses: the lock expired
    rcv.take([Msg(8, b"w", count=5)], polled=clock.now)
    assert (rcv.status.records, rcv.status.accept_refused, rcv.status.ack_failures) == (2, 2, 2)


def test_a_last_delivery_that_cannot_be_logged_is_rejected_and_named(tmp_path: Path) -> None:
    rcv, consumer, _clock, named = receiver(tmp_path, fail=True, attempts=5, limit=5)
    with pytest.raises(OSError, match="No space left"):
        rcv.take([Msg(0, b"a", count=5), Msg(1, b"b", count=2)], polled=100.0)
    # The broker archives the first when it comes back: named; the second comes back.
    assert consumer.acks == [(0, "REJECT")]
    assert [(e["offset"], e["delivery_count"]) for e in named] == [(0, 5)]
    assert "could not be logged: OSError" in named[0]["reason"]


def test_a_refused_record_on_the_groups_last_delivery_is_rejected_not_released(
    tmp_path: Path,
) -> None:
    def check(_record: Any) -> None:
        raise ValueError("cannot parse")

    # maxDeliveryAttempts above the group's limit: released on delivery 5, the broker would
    # archive it unnamed.
    rcv, consumer, _clock, named = receiver(tmp_path, check=check, attempts=7, limit=5)
    rcv.take([Msg(3, b"bad", count=4), Msg(4, b"bad", count=5)], polled=100.0)
    assert consumer.acks == [(3, "RELEASE"), (4, "REJECT")]
    assert [e["offset"] for e in named] == [4]
