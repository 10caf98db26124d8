"""The receiver stream's driver loop (kafka_direct.dstream.receiver.stream) against fakes: a
supervisor that starts no Spark job, blocks written by the test as a receiver would, and a frame
builder that hands the batch function the blocks instead of a DataFrame.

Checked here: blocks left by an earlier run are the first batch's, a batch's blocks are marked
done only after its function returns, a failed batch leaves them in the log, a graceful stop
runs a last batch over what the receivers logged, a receiver that cannot be restarted stops the
stream, and an empty batch still calls the function.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kafka_direct.config.receiver import receiver_stream_config
from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.dstream.receiver.control import ReceiverStatus
from kafka_direct.dstream.receiver.progress import ReceiverBatchFailedError
from kafka_direct.dstream.receiver.stream import ReceiverKafkaStream
from kafka_direct.dstream.receiver.supervisor import ReceiverFailedError
from kafka_direct.dstream.receiver.wal import BlockMeta, BlockWriter
from kafka_direct.dstream.receiver.wal_log import PendingBlock
from kafka_direct.errors import StreamStateError
from kafka_direct.offsets import OffsetRange
from tests.unit.dstream.test_wal import batch

WAIT = 10.0


class FakeSupervisor:
    """Starts nothing; ``stop`` is where a real one would wait for the receivers' last block."""

    instances: ClassVar[list[FakeSupervisor]] = []

    def __init__(self, spark: Any, config: Any, root: str, run: str, *, on_failure: Any) -> None:
        self.root, self.run, self.on_failure = root, run, on_failure
        self.slots = 4
        self.restarts: list[int] = []
        self.stopped: list[bool] = []
        self.on_stop: Callable[[], None] = lambda: None
        FakeSupervisor.instances.append(self)

    def check(self) -> None:
        pass

    def claim(self) -> None:
        pass

    def release(self) -> None:
        pass

    def start(self) -> None:
        pass

    def statuses(self) -> list[ReceiverStatus]:
        return []

    def all_statuses(self) -> list[ReceiverStatus]:
        return []

    def stop(self, *, graceful: bool) -> None:
        self.stopped.append(graceful)
        self.on_stop()


def log_block(root: Path, run: str, first: int, n: int, durable: bool = True) -> str:
    """Append a block as a receiver of ``run`` would."""
    writer = BlockWriter(str(root), run, durable=durable, schema=ARROW_SCHEMA)
    meta = BlockMeta(0, run, time.time_ns(), n, (("t", 0, first, first + n, n),))
    return writer.append([batch(n, first)], meta)


class Harness:
    def __init__(self, root: Path, *, wal: bool = True, fn: Any = None) -> None:
        config = receiver_stream_config(
            {"bootstrap.servers": "b:9092", "group.id": "g"},
            ["t"],
            batch_interval=0.05,
            num_receivers=1,
            write_ahead_log=wal,
            wal_dir=str(root),
            max_rate_per_receiver=None,
            max_pending_blocks=None,
            block_interval=0.05,
            include_headers=False,
            retained_batches=100,
        )
        self.calls: list[tuple[list[str], list[OffsetRange]]] = []
        self.fn = fn
        self.stream = ReceiverKafkaStream(
            None,
            config,
            supervisor_factory=FakeSupervisor,
            frame_builder=self.frame,
        )
        self.stream.foreachBatch(self.call)

    def frame(self, blocks: Sequence[PendingBlock]) -> list[str]:
        return [b.ref for b in blocks]

    def call(self, df: list[str], ranges: list[OffsetRange]) -> None:
        self.calls.append((df, ranges))
        if self.fn is not None:
            self.fn(df, ranges)

    @property
    def supervisor(self) -> FakeSupervisor:
        return FakeSupervisor.instances[-1]

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")


def test_blocks_of_an_earlier_run_are_the_first_batch_and_are_marked_done(tmp_path: Path) -> None:
    old = [log_block(tmp_path, "old-run", 0, 3), log_block(tmp_path, "old-run", 3, 2)]
    h = Harness(tmp_path)
    h.stream.start()
    h.wait(lambda: len(h.stream.batches) >= 2, "two batches")
    h.stream.stop()
    assert h.stream.awaitTermination(WAIT)
    first = h.stream.batches[0]
    assert h.calls[0] == (old, [OffsetRange("t", 0, 0, 5)])
    assert (first.num_records, first.blocks, first.recovered_blocks) == (5, 2, 2)
    assert h.calls[1] == ([], [])  # an empty batch still calls the function
    assert os.listdir(tmp_path / "blocks") == []
    assert h.stream.recovery is not None and h.stream.recovery.leftover_records == 5


def test_a_failed_batch_leaves_its_blocks_in_the_log(tmp_path: Path) -> None:
    ref = log_block(tmp_path, "old-run", 0, 3)

    def fail(df: list[str], ranges: list[OffsetRange]) -> None:
        raise ValueError("the sink is down")

    h = Harness(tmp_path, fn=fail)
    h.stream.start()
    with pytest.raises(ReceiverBatchFailedError, match="the sink is down") as info:
        h.stream.awaitTermination(WAIT)
    assert "the next run of the stream processes them first" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert os.listdir(tmp_path / "blocks") == [os.path.basename(ref)]
    assert h.supervisor.stopped == [False]  # the receivers are stopped too


def test_a_graceful_stop_processes_what_the_receivers_logged_last(tmp_path: Path) -> None:
    h = Harness(tmp_path, wal=False)
    h.stream.start()
    h.wait(lambda: len(h.stream.batches) >= 1, "a batch")
    run = h.supervisor.run
    # What a receiver logs while it stops (its last block) belongs to a last batch.
    h.supervisor.on_stop = lambda: log_block(tmp_path, run, 0, 4, durable=False)
    h.stream.stop(graceful=True)
    assert h.stream.awaitTermination(WAIT)
    assert h.supervisor.stopped == [True]
    assert h.calls[-1][1] == [OffsetRange("t", 0, 0, 4)]
    assert h.stream.batches[-1].num_records == 4
    assert not (tmp_path / "volatile" / run).exists()


def test_a_receiver_that_cannot_be_restarted_stops_the_stream(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.stream.start()
    h.wait(lambda: len(h.stream.batches) >= 1, "a batch")
    h.supervisor.on_failure(ReceiverFailedError(0, "g", "GROUP_AUTHORIZATION_FAILED", 1))
    with pytest.raises(ReceiverFailedError, match="GROUP_AUTHORIZATION_FAILED"):
        h.stream.awaitTermination(WAIT)
    assert not h.stream.isActive


def test_stop_from_inside_the_batch_function(tmp_path: Path) -> None:
    stopper: list[ReceiverKafkaStream] = []
    h = Harness(tmp_path, fn=lambda df, ranges: stopper[0].stop())
    stopper.append(h.stream)
    h.stream.start()
    assert h.stream.awaitTermination(WAIT)
    assert len(h.calls) == 1


def test_the_lifecycle_is_checked(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with pytest.raises(StreamStateError, match="never started"):
        h.stream.awaitTermination(0)
    with pytest.raises(StreamStateError, match="commits by itself"):
        h.stream.commitAsync([])
    h.stream.start()
    with pytest.raises(StreamStateError, match="only once"):
        h.stream.start()
    with pytest.raises(StreamStateError, match="before start"):
        h.stream.foreachBatch(lambda df, ranges: None)
    h.stream.stop()
    assert h.stream.awaitTermination(WAIT)
    assert "ReceiverKafkaStream(group=g" in repr(h.stream)
