"""A receiver's loop (kafka_direct.dstream.receiver.loop) around a fake consumer: blocks, commits
after logging, rebalances, back-pressure, the rate limit, errors and stopping.

No broker, no Spark: a fake consumer hands over fake messages and records pause/resume; blocks
are written to tmp_path; a fake clock decides when a block is due, so nothing depends on speed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.config.receiver import receiver_stream_config
from kafka_direct.consumer.rows import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS
from kafka_direct.dstream.receiver.loop import Receiver, ReceiverSpec
from kafka_direct.dstream.receiver.wal import BlockWriter, FileSystem, block_meta, read_block
from kafka_direct.errors import ConfigurationError

PARAMS = {"bootstrap.servers": "b:9092", "group.id": "g", "sasl.password": "hunter2"}


class FakeMessage:
    """What the receiver reads from a confluent-kafka message (to_record_batch included)."""

    def __init__(
        self, topic: str, partition: int, offset: int, value: bytes, err: Any = None
    ) -> None:
        self._t, self._p, self._o, self._v, self._err = topic, partition, offset, value, err

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes:
        return self._v

    def __len__(self) -> int:  # as confluent-kafka's: the value's length
        return len(self._v or b"")

    def key(self) -> bytes | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._o)

    def headers(self) -> None:
        return None

    def error(self) -> Any:
        return self._err


@dataclass(frozen=True)
class FakePartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class FakePosition:
    topic: str
    partition: int
    offset: int


class FakeError:
    def __init__(self, name: str, fatal: bool = False) -> None:
        self._name, self._fatal = name, fatal

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return f"{self._name} happened"

    def fatal(self) -> bool:
        return self._fatal


class FakeConsumer:
    """A group member: messages to hand over, rebalances to run inside the next consume()."""

    def __init__(self, events: list[tuple[str, str]]) -> None:
        self.events = events
        self.queue: list[FakeMessage] = []
        self.callbacks: dict[str, Callable[..., None]] = {}
        self.assigned: list[FakePartition] = []
        self.paused: set[FakePartition] = set()
        self.rebalances: list[tuple[str, list[FakePartition]]] = []
        #: (records put in the call's result first, rebalances then, the new fetch or None)
        self.mid_call: tuple[int, list[tuple[str, list[FakePartition]]], Any] | None = None
        self.positions: dict[tuple[str, int], int] = {}
        self.asked: list[int] = []

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None]) -> None:
        self.callbacks = callbacks

    def feed(self, messages: list[FakeMessage]) -> None:
        self.queue.extend(messages)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        """As librdkafka's: rebalances queued now are served first; one queued in
        ``mid_call`` is served after the call has put that many records in its result."""
        self.asked.append(num_messages)
        self._serve(self.rebalances)
        taken = self._take(num_messages)
        if self.mid_call is not None:
            after, rebalances, then = self.mid_call
            self.mid_call = None
            taken, rest = taken[:after], taken[after:]
            self.queue = rest + self.queue
            self._serve(rebalances)
            if then is not None:
                self.queue = then  # the fetch of the new assignment
            taken += self._take(num_messages - len(taken))
        return taken

    def _serve(self, rebalances: list[tuple[str, list[FakePartition]]]) -> None:
        while rebalances:
            kind, parts = rebalances.pop(0)
            if kind == "assign":
                self.assigned = list(parts)
                for p in parts:  # a new assignment has no position until it hands a record
                    self.positions.pop((p.topic, p.partition), None)
            self.callbacks[f"on_{kind}"](self, parts)
            self.events.append(
                (f"{kind}-returned", ",".join(f"{p.topic}-{p.partition}" for p in parts))
            )
            if kind in ("revoke", "lost"):
                self.assigned = [p for p in self.assigned if p not in parts]

    def _take(self, n: int) -> list[FakeMessage]:
        ready = [
            m for m in self.queue if FakePartition(m.topic(), m.partition()) not in self.paused
        ]
        taken = ready[:n]
        self.queue = [m for m in self.queue if m not in taken]
        for m in taken:  # handed to the application: its position moves past it
            self.positions[(m.topic(), m.partition())] = m.offset() + 1
        return taken

    def position(self, parts: list[FakePartition]) -> list[FakePosition]:
        return [
            FakePosition(p.topic, p.partition, self.positions.get((p.topic, p.partition), -1001))
            for p in parts
        ]

    def assignment(self) -> list[FakePartition]:
        return list(self.assigned)

    def pause(self, parts: list[FakePartition]) -> None:
        self.paused |= set(parts)
        self.events.append(("pause", ",".join(f"{p.topic}-{p.partition}" for p in parts)))

    def resume(self, parts: list[FakePartition]) -> None:
        self.paused -= set(parts)
        self.events.append(("resume", ",".join(f"{p.topic}-{p.partition}" for p in parts)))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeSignals:
    def __init__(self) -> None:
        self.reason: str | None = None

    def stop_reason(self) -> str | None:
        return self.reason


class FixedPending(BlockWriter):
    """A writer whose pending count the test sets (the log as other receivers fill it)."""

    forced: int | None = None

    def pending(self) -> int:
        return super().pending() if self.forced is None else self.forced


def make_receiver(
    tmp_path: Path,
    *,
    fs: FileSystem | None = None,
    events: list[tuple[str, str]] | None = None,
    classify: Callable[[Any], BaseException | None] = lambda _e: None,
    commit_results: list[bool] | None = None,
    group_offsets: dict[tuple[str, int], int | None] | None = None,
    **overrides: Any,
) -> tuple[Receiver, FakeConsumer]:
    events = events if events is not None else []
    args: dict[str, Any] = {
        "batch_interval": 1.0,
        "num_receivers": 1,
        "write_ahead_log": True,
        "wal_dir": str(tmp_path),
        "max_rate_per_receiver": None,
        "max_pending_blocks": 4,
        "block_interval": 0.2,
        "include_headers": False,
        "retained_batches": 10,
    }
    args.update(overrides)
    config = receiver_stream_config(PARAMS, ["t"], **args)
    spec = ReceiverSpec(config, str(tmp_path), "run-1", 0, 0, 60.0)
    consumer = FakeConsumer(events)
    schema = ARROW_SCHEMA_WITH_HEADERS if config.include_headers else ARROW_SCHEMA
    writer = FixedPending(
        str(tmp_path), "run-1", durable=config.write_ahead_log, schema=schema, fs=fs
    )
    clock = FakeClock()

    results = commit_results if commit_results is not None else []

    def commit(offsets: dict[tuple[str, int], int]) -> bool:
        ok = results.pop(0) if results else True  # the group's answers, in order; then yes
        shown = ",".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items()))
        events.append(("commit" if ok else "commit-refused", shown))
        return ok

    def committed(parts: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        events.append(("committed?", ",".join(f"{t}-{p}" for t, p in parts)))
        offsets = group_offsets or {}
        return {tp: offsets.get(tp) for tp in parts}

    receiver = Receiver(
        spec,
        consumer,
        writer,
        FakeSignals(),  # type: ignore[arg-type]
        committer=commit,
        committed=committed,
        classify_error=classify,
        clock=clock,
        sleep=clock.sleep,
        report=lambda status: None,
    )
    receiver.consumer.subscribe(
        ["t"],
        on_assign=receiver._on_assign,
        on_revoke=receiver._on_revoke,
        on_lost=receiver._on_lost,
    )
    receiver._test_clock = clock  # type: ignore[attr-defined]
    return receiver, consumer


def messages(partition: int, first: int, n: int) -> list[FakeMessage]:
    return [
        FakeMessage("t", partition, first + i, f"p{partition}-{first + i}".encode())
        for i in range(n)
    ]


def blocks(root: Path) -> list[Any]:
    return [
        block_meta(str(root / "blocks" / n))
        for n in sorted(os.listdir(root / "blocks"))
        if n.endswith(".arrow")
    ]


def test_a_block_is_closed_every_block_interval_and_committed_after_it_is_logged(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    clock = receiver._test_clock  # type: ignore[attr-defined]
    consumer.feed(messages(0, 0, 3) + messages(1, 10, 2))
    receiver.step()
    assert blocks(tmp_path) == []  # not due yet
    clock.now += 0.25
    receiver.step()
    [meta] = blocks(tmp_path)
    assert meta.records == 5
    assert meta.ranges == (("t", 0, 0, 3, 3), ("t", 1, 10, 12, 2))
    assert events == [("commit", "t-0@3,t-1@12")]
    assert receiver.status.records == 5 and receiver.status.blocks == 1


def test_revocation_logs_and_commits_everything_received_before_the_partitions_go(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [FakePartition("t", 0), FakePartition("t", 1)]))
    consumer.feed(messages(0, 0, 4) + messages(1, 0, 2))
    receiver.step()  # assigned, records taken into a block that is not due
    assert blocks(tmp_path) == []
    consumer.rebalances.append(("revoke", [FakePartition("t", 0), FakePartition("t", 1)]))
    receiver.step()
    kinds = [e[0] for e in events]
    # The block was logged and committed inside the callback, before it returned.
    assert kinds.index("commit") < kinds.index("revoke-returned")
    assert events[kinds.index("commit")] == ("commit", "t-0@4,t-1@2")
    assert [m.records for m in blocks(tmp_path)] == [6]
    assert receiver.status.assignment == []


def test_a_lost_assignment_drops_its_unlogged_records_without_committing(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.rebalances.append(("assign", [FakePartition("t", 0), FakePartition("t", 1)]))
    consumer.feed(messages(0, 0, 4) + messages(1, 0, 2))
    receiver.step()
    consumer.rebalances.append(("lost", [FakePartition("t", 0)]))
    receiver.step()
    receiver.flush("test")
    assert [m.ranges for m in blocks(tmp_path)] == [(("t", 1, 0, 2, 2),)]
    assert [e for e in events if e[0] == "commit"] == [("commit", "t-1@2")]


def test_receivers_pause_while_the_log_holds_max_pending_blocks_and_resume_below(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events, max_pending_blocks=4)
    clock = receiver._test_clock  # type: ignore[attr-defined]
    writer: FixedPending = receiver.writer  # type: ignore[assignment]
    consumer.rebalances.append(("assign", [FakePartition("t", 0)]))
    writer.forced = 3
    receiver.step()
    assert not receiver.paused
    writer.forced = 4
    clock.now += 0.2
    consumer.feed(messages(0, 0, 5))
    receiver.step()
    assert receiver.paused and ("pause", "t-0") in events
    assert receiver.status.state == "paused" and receiver.status.pauses == 1
    assert blocks(tmp_path) == []  # paused: nothing taken, nothing logged
    # A rebalance while paused: the new assignment is paused too.
    consumer.rebalances.append(("assign", [FakePartition("t", 0), FakePartition("t", 2)]))
    clock.now += 0.2
    receiver.step()
    assert consumer.paused == {FakePartition("t", 0), FakePartition("t", 2)}
    writer.forced = 3
    clock.now += 0.2
    receiver.step()
    assert not receiver.paused and consumer.paused == set()
    assert events[-1][0] == "resume"


def test_the_rate_limit_caps_records_per_second(tmp_path: Path) -> None:
    receiver, consumer = make_receiver(tmp_path, max_rate_per_receiver=100, max_pending_blocks=100)
    clock = receiver._test_clock  # type: ignore[attr-defined]
    consumer.feed(messages(0, 0, 1000))
    taken = 0
    start = clock.now
    while clock.now - start < 2.0:
        before = len(consumer.queue)
        receiver.step()
        taken += before - len(consumer.queue)
        clock.now += 0.01
    # 2 s at 100/s, plus the first burst of one block interval's worth (20).
    assert 180 <= taken <= 225
    assert max(consumer.asked) <= 20


def test_a_fatal_consumer_error_ends_the_receiver_with_a_fatal_status(tmp_path: Path) -> None:
    def classify(error: Any) -> BaseException | None:
        if error.name() == "GROUP_AUTHORIZATION_FAILED":
            return ConfigurationError("group.id", "g", "a group this user may read")
        return None

    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events, classify=classify)
    consumer.feed(messages(0, 0, 2))
    consumer.feed([FakeMessage("t", 0, -1, b"", err=FakeError("UNKNOWN_TOPIC_OR_PART"))])
    receiver.step()  # a warning only
    consumer.feed([FakeMessage("t", 0, -1, b"", err=FakeError("GROUP_AUTHORIZATION_FAILED"))])
    receiver.signals.reason = None  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError):
        receiver.run()
    assert receiver.status.state == "failed" and receiver.status.fatal
    assert "group.id" in (receiver.status.error or "")
    assert "commit" not in [e[0] for e in events]  # what was not logged is never committed
    assert receiver.block.records == 0


def test_stopping_logs_and_commits_the_last_block(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events)
    consumer.feed(messages(0, 0, 3))
    receiver.step()

    def stop_after_one_more_step() -> str | None:
        return "the stream is stopping" if receiver.block.records else None

    receiver.signals.stop_reason = stop_after_one_more_step  # type: ignore[method-assign]
    assert receiver.run() == "the stream is stopping"
    assert [m.records for m in blocks(tmp_path)] == [3]
    assert events[-1] == ("commit", "t-0@3")
    assert receiver.status.state == "stopped"


def test_the_receivers_spec_and_config_never_show_secrets(tmp_path: Path) -> None:
    receiver, _ = make_receiver(tmp_path)
    assert "hunter2" not in repr(receiver.spec)
    assert "hunter2" not in repr(receiver.spec.config)


def test_with_include_headers_blocks_carry_the_headers_column(tmp_path: Path) -> None:
    receiver, consumer = make_receiver(tmp_path, include_headers=True)
    consumer.feed(messages(0, 0, 2))
    receiver.step()
    receiver.flush("test")
    [name] = [n for n in os.listdir(tmp_path / "blocks") if n.endswith(".arrow")]
    [batch] = list(read_block(str(tmp_path), os.path.join("blocks", name)))
    assert batch.schema == ARROW_SCHEMA_WITH_HEADERS
    assert batch.column("headers").to_pylist() == [None, None]  # as Spark: null, not []


def test_blocks_of_large_records_stay_near_their_byte_bound(tmp_path: Path) -> None:
    # 3 MB records, more than fit one block: each read takes what the block has room for (its
    # first record whatever its size), so a block closes within about one record of 8 MB.
    receiver, consumer = make_receiver(tmp_path)
    big = 3 * 1024 * 1024
    consumer.feed([FakeMessage("t", 0, offset, bytes([offset]) * big) for offset in range(12)])
    for _ in range(12):
        receiver.step()
    receiver.flush("stop")
    metas = blocks(tmp_path)
    assert sum(m.records for m in metas) == 12
    assert all(m.records <= 4 for m in metas), [m.records for m in metas]


# -- failed commits are owed, not dropped ------------------------------------------------------


def _assign(consumer: FakeConsumer, *partitions: int) -> None:
    consumer.rebalances.append(("assign", [FakePartition("t", p) for p in partitions]))


def test_a_refused_commit_is_carried_by_the_next_blocks_commit(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events, commit_results=[False])
    clock = receiver._test_clock  # type: ignore[attr-defined]
    _assign(consumer, 0, 1)
    consumer.feed(messages(0, 0, 3) + messages(1, 0, 2))
    receiver.step()
    clock.now += 0.25
    receiver.step()  # block 1 logged; its commit refused
    consumer.feed(messages(0, 3, 2))
    receiver.step()
    clock.now += 0.25
    receiver.step()  # block 2 (partition 0 only) carries partition 1's debt
    assert [e for e in events if e[0].startswith("commit")] == [
        ("commit-refused", "t-0@3,t-1@2"),
        ("commit", "t-0@5,t-1@2"),
    ]
    assert not receiver.ledger and receiver.status.commit_failures == 1


def test_a_refused_commit_is_retried_when_no_block_comes(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events, commit_results=[False])
    clock = receiver._test_clock  # type: ignore[attr-defined]
    _assign(consumer, 0)
    consumer.feed(messages(0, 0, 3))
    receiver.step()
    clock.now += 0.25
    receiver.step()  # logged; refused
    receiver.step()  # too soon to retry
    assert [e[0] for e in events if e[0].startswith("commit")] == ["commit-refused"]
    clock.now += 1.0
    receiver.step()
    assert events[-1] == ("commit", "t-0@3")
    assert not receiver.ledger


@pytest.mark.parametrize(
    ("group_offset", "commits_on_return"),
    [
        (None, [("commit", "t-0@4")]),  # the group has no offset: the debt is committed
        (0, [("commit", "t-0@4")]),  # behind what was logged: committed before the fetch
        (4, []),  # already there
        (9, []),  # another member read further meanwhile: never moved back
    ],
)
def test_a_partition_back_after_a_lost_assignment_is_not_read_again(
    tmp_path: Path,
    group_offset: int | None,
    commits_on_return: list[tuple[str, str]],
) -> None:
    # The broker stalled past the session timeout: the block's commit is refused, the
    # assignment is lost, and the group gives the partition back to this receiver.
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(
        tmp_path,
        events=events,
        commit_results=[False],
        group_offsets={("t", 0): group_offset},
    )
    clock = receiver._test_clock  # type: ignore[attr-defined]
    _assign(consumer, 0)
    consumer.feed(messages(0, 0, 4))
    receiver.step()
    clock.now += 0.25
    receiver.step()  # logged; commit refused
    consumer.rebalances.append(("lost", [FakePartition("t", 0)]))
    receiver.step()
    assert receiver.ledger.owed == {("t", 0): 4}  # the records are in the log: still owed
    events.clear()
    _assign(consumer, 0)
    receiver.step()
    kinds = [e[0] for e in events]
    assert kinds[0] == "committed?" and kinds[-1] == "assign-returned"
    # Any commit happens inside the callback, before the consumer fetches from the group offset.
    assert [e for e in events if e[0] in ("commit", "commit-refused")] == commits_on_return
    assert not receiver.ledger


def test_a_debt_for_a_partition_now_elsewhere_is_never_committed(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, events=events, commit_results=[False, False])
    clock = receiver._test_clock  # type: ignore[attr-defined]
    _assign(consumer, 0, 1)
    consumer.feed(messages(0, 0, 2) + messages(1, 0, 2))
    receiver.step()
    # Revoked with the block open: logged, and its commit refused (the rebalance is under way).
    consumer.rebalances.append(("revoke", [FakePartition("t", 0), FakePartition("t", 1)]))
    receiver.step()
    _assign(consumer, 1)  # partition 0 went to another member
    consumer.feed(messages(1, 2, 1))
    receiver.step()
    clock.now += 0.25
    receiver.step()
    commits = [e for e in events if e[0].startswith("commit")]
    assert commits[-1] == ("commit", "t-1@3")  # partition 0's offsets are its new owner's now
    assert receiver.ledger.owed == {("t", 0): 2}
