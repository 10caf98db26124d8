"""The receiver stream's write-ahead log (kafka_direct.dstream.receiver.wal, wal_log): the order
of a block's append, what a block holds, and the driver's recovery and bookkeeping.

No broker, no Spark: blocks are written to tmp_path; a recording file system shows the order of
the calls, and a receiver with a fake consumer shows that a block is synced before its offsets
are committed (Spark's rule: committing first is how auto-commit loses data).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO

import pyarrow as pa
import pytest

from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.dstream.receiver.wal import (
    BlockMeta,
    BlockWriter,
    FileSystem,
    block_meta,
    read_block,
)
from kafka_direct.dstream.receiver.wal_log import BlockLog
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange
from tests.unit.dstream.test_receiver_loop import FakeMessage, make_receiver


class RecordingFs(FileSystem):
    """The real file system, recording each call (and failing one on request)."""

    def __init__(self, events: list[tuple[str, str]], fail: str | None = None) -> None:
        self.events = events
        self.fail = fail

    def _note(self, what: str, path: str) -> None:
        self.events.append((what, os.path.basename(path)))
        if what == self.fail:
            raise OSError(28, f"No space left on device (injected at {what})")

    def open_new(self, path: str) -> IO[bytes]:
        self._note("open", path)
        return super().open_new(path)

    def sync_file(self, handle: IO[bytes]) -> None:
        self._note("fsync", handle.name if isinstance(handle.name, str) else "?")
        super().sync_file(handle)

    def rename(self, src: str, dst: str) -> None:
        self._note("rename", dst)
        super().rename(src, dst)

    def sync_dir(self, path: str) -> None:
        self._note("fsync-dir", path)
        super().sync_dir(path)


def batch(n: int, first: int = 0, topic: str = "t", partition: int = 0) -> pa.RecordBatch:
    messages = [
        FakeMessage(topic, partition, first + i, f"v{first + i}".encode()) for i in range(n)
    ]
    from kafka_direct.consumer.rows import to_record_batch

    return to_record_batch(topic, partition, messages, False)


def meta(
    records: int, ranges: tuple[tuple[str, int, int, int, int], ...], run: str = "r1"
) -> BlockMeta:
    return BlockMeta(receiver=0, run=run, created_ns=time.time_ns(), records=records, ranges=ranges)


def test_a_block_is_written_fsynced_renamed_and_its_directory_fsynced_in_that_order(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    writer = BlockWriter(
        str(tmp_path), "r1", durable=True, schema=ARROW_SCHEMA, fs=RecordingFs(events)
    )
    ref = writer.append([batch(3)], meta(3, (("t", 0, 0, 3, 3),)))
    name = os.path.basename(ref)
    assert [e[0] for e in events] == ["open", "fsync", "rename", "fsync-dir"]
    assert events[0][1] == f".{name}.tmp"  # written under a temporary name...
    assert events[2][1] == name  # ...renamed to its final name only once synced
    assert events[3][1] == "blocks"
    assert ref == os.path.join("blocks", name)
    assert os.listdir(tmp_path / "blocks") == [name]


def test_the_receiver_commits_a_block_only_after_it_is_durable(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(tmp_path, fs=RecordingFs(events), events=events)
    consumer.feed([FakeMessage("t", 0, i, b"x") for i in range(5)])
    receiver.step()  # takes the records
    receiver.flush("test")
    kinds = [e[0] for e in events]
    assert kinds == ["open", "fsync", "rename", "fsync-dir", "commit"]
    assert events[-1] == ("commit", "t-0@5")


def test_a_block_that_cannot_be_made_durable_is_never_committed(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    receiver, consumer = make_receiver(
        tmp_path, fs=RecordingFs(events, fail="fsync"), events=events
    )
    consumer.feed([FakeMessage("t", 0, i, b"x") for i in range(5)])
    receiver.step()
    with pytest.raises(OSError, match="No space left"):
        receiver.flush("test")
    assert "commit" not in [e[0] for e in events]
    assert os.listdir(tmp_path / "blocks") == []  # the partial file is removed too


def test_without_the_wal_blocks_go_to_the_runs_volatile_directory_unsynced(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    writer = BlockWriter(
        str(tmp_path), "run-7", durable=False, schema=ARROW_SCHEMA, fs=RecordingFs(events)
    )
    ref = writer.append([batch(2)], meta(2, (("t", 0, 0, 2, 2),)))
    assert [e[0] for e in events] == ["open", "rename"]  # no fsync at all
    assert ref.startswith(os.path.join("volatile", "run-7") + os.sep)
    assert writer.pending() == 1


def test_a_block_reads_back_with_the_sources_schema_and_its_footer(tmp_path: Path) -> None:
    writer = BlockWriter(str(tmp_path), "r1", durable=True, schema=ARROW_SCHEMA)
    m = meta(5, (("t", 0, 10, 13, 3), ("t", 1, 0, 2, 2)))
    ref = writer.append([batch(3, first=10), batch(2, partition=1)], m)
    batches = list(read_block(str(tmp_path), ref))
    assert [b.schema for b in batches] == [ARROW_SCHEMA, ARROW_SCHEMA]
    assert [v.as_py() for v in pa.Table.from_batches(batches).column("value")] == [
        b"v10",
        b"v11",
        b"v12",
        b"v0",
        b"v1",
    ]
    assert block_meta(str(tmp_path / ref)) == m
    assert m.offset_ranges() == [OffsetRange("t", 0, 10, 13), OffsetRange("t", 1, 0, 2)]
    # Marked done meanwhile: the same reference still reads, from done/.
    os.makedirs(tmp_path / "done")
    os.rename(tmp_path / ref, tmp_path / "done" / os.path.basename(ref))
    assert sum(b.num_rows for b in read_block(str(tmp_path), ref)) == 5


def test_block_names_sort_oldest_first(tmp_path: Path) -> None:
    names = [BlockMeta(0, "r", ns, 1, ()).name() for ns in (30, 1000, 2)]
    assert sorted(names) == [names[2], names[0], names[1]]


# -- the driver's side -------------------------------------------------------------------------


def _write(root: Path, run: str, durable: bool, records: int, first: int = 0) -> str:
    writer = BlockWriter(str(root), run, durable=durable, schema=ARROW_SCHEMA)
    return writer.append(
        [batch(records, first)], meta(records, (("t", 0, first, first + records, records),), run)
    )


def test_recovery_keeps_logged_blocks_and_discards_partial_and_volatile_ones(
    tmp_path: Path,
) -> None:
    old = BlockLog(str(tmp_path), "old", durable=True)
    old.prepare("g", ["t"])
    logged = _write(tmp_path, "old", True, 4)
    _write(tmp_path, "nowal", False, 7)  # an earlier run without the WAL: received, unprocessed
    (tmp_path / "blocks" / ".x.arrow.tmp").write_bytes(b"half a block")
    (tmp_path / "done" / "y.arrow").write_bytes(b"processed")

    log = BlockLog(str(tmp_path), "new", durable=True)
    log.prepare("g", ["t"])
    found = log.recover()
    assert (found.leftover_blocks, found.leftover_records) == (1, 4)
    assert (found.discarded_blocks, found.discarded_records) == (1, 7)
    assert found.partial_blocks == 1
    assert [b.ref for b in log.pending()] == [logged]
    assert os.listdir(tmp_path / "done") == []
    assert not (tmp_path / "volatile" / "nowal").exists()


def test_marking_done_moves_the_blocks_durably_and_purging_deletes_them_later(
    tmp_path: Path,
) -> None:
    events: list[tuple[str, str]] = []
    log = BlockLog(str(tmp_path), "r1", durable=True, fs=RecordingFs(events))
    log.prepare("g", ["t"])
    _write(tmp_path, "r1", True, 2)
    _write(tmp_path, "r1", True, 3, first=2)
    pending = log.pending()
    events.clear()
    done = log.mark_done(pending)
    assert [e[0] for e in events] == ["rename", "rename", "fsync-dir", "fsync-dir"]
    assert log.pending() == []
    assert sorted(os.listdir(tmp_path / "done")) == sorted(os.path.basename(d) for d in done)
    log.purge_done(done)
    assert os.listdir(tmp_path / "done") == []


def test_a_run_without_the_wal_sees_its_own_volatile_blocks_and_the_logged_ones(
    tmp_path: Path,
) -> None:
    log = BlockLog(str(tmp_path), "r2", durable=False)
    log.prepare("g", ["t"])
    logged = _write(tmp_path, "r1", True, 1)  # left by an earlier run with the WAL
    mine = _write(tmp_path, "r2", False, 2, first=1)
    assert [b.ref for b in log.pending()] == [logged, mine]
    log.discard_run()
    assert [b.ref for b in log.pending()] == [logged]


def test_a_wal_dir_of_another_group_is_refused(tmp_path: Path) -> None:
    BlockLog(str(tmp_path), "r1", durable=True).prepare("orders", ["t"])
    with pytest.raises(ConfigurationError, match=r"'walDir'.*group 'orders'") as info:
        BlockLog(str(tmp_path), "r2", durable=True).prepare("payments", ["t"])
    assert info.value.value == str(tmp_path)


def test_blocks_left_with_the_other_include_headers_are_refused_until_processed(
    tmp_path: Path,
) -> None:
    # Regression (review): a restart with the other includeHeaders put blocks of both column
    # sets in one batch, whose read failed at every restart.
    BlockLog(str(tmp_path), "r1", durable=True).prepare("g", ["t"], headers=False)
    _write(tmp_path, "r1", True, 3)
    changed = BlockLog(str(tmp_path), "r2", durable=True)
    with pytest.raises(ConfigurationError, match=r"'includeHeaders'.*Restart with that setting"):
        changed.prepare("g", ["t"], headers=True)
    same = BlockLog(str(tmp_path), "r3", durable=True)
    same.prepare("g", ["t"], headers=False)
    same.mark_done(same.pending())
    BlockLog(str(tmp_path), "r4", durable=True).prepare("g", ["t"], headers=True)  # none left


def test_a_wal_dir_the_driver_cannot_write_names_the_path_and_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    root = str(blocker / "wal")
    with pytest.raises(
        ConfigurationError, match="could not write there: NotADirectoryError"
    ) as info:
        BlockLog(root, "r1", durable=True).prepare("g", ["t"])
    assert info.value.option == "walDir" and info.value.value == root


def test_pending_counts_what_the_pause_rule_sees(tmp_path: Path) -> None:
    writer = BlockWriter(str(tmp_path), "r1", durable=True, schema=ARROW_SCHEMA)
    for i in range(3):
        writer.append([batch(1, i)], meta(1, (("t", 0, i, i + 1, 1),)))
    (tmp_path / "blocks" / ".partial.arrow.tmp").write_bytes(b"")
    assert writer.pending() == 3
