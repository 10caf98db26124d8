"""The receiver stream's write-ahead log: received records in blocks, one Arrow IPC file each, in
a directory every node shares. Plain library, pure I/O (no Spark, no Kafka client): receivers on
executors append blocks, the Spark driver lists them and marks them done, batch tasks read them.

Layout of ``walDir``::

    stream.json          the group the log belongs to (another group's stream is refused)
    blocks/NAME.arrow    the log: blocks not yet processed; NAME sorts by creation time
    blocks/.NAME.tmp     a block being written: never committed, so removed at start
    volatile/RUN/        writeAheadLog=False: run RUN's blocks, never fsynced, removed at start
    done/NAME.arrow      processed blocks, deleted after the next batch
    invalid/NAME.arrow   blocks no batch could read (an unreadable footer), set aside (wal_log)
    control/             the driver's heartbeat, stop markers, receiver status (receiver_control)

**The order of one append** (:meth:`BlockWriter.append`), which is the whole point of the log:
write the block to a temporary name, flush, fsync the file, rename it to its final name, fsync
the directory. Only when ``append`` returns may the receiver commit the block's offsets to the
group. Committing first is how auto-commit loses data: a crash between the commit and the write
leaves offsets that say "read" for records that are nowhere. Without the WAL the same steps run
without the two fsyncs, in a directory the next run deletes.

A block's footer holds its :class:`BlockMeta` (receiver, offsets, record count), so the driver
learns what a batch holds without reading its rows. Every I/O call goes through
:class:`FileSystem`, which tests replace to record the order of calls.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO

import pyarrow as pa

from kafka_direct.offsets import OffsetRange, TopicPartition

__all__ = [
    "BLOCKS",
    "DONE",
    "BlockMeta",
    "BlockWriter",
    "FileSystem",
    "block_meta",
    "done_path",
    "read_block",
    "volatile_dir",
]

BLOCKS = "blocks"
DONE = "done"
VOLATILE = "volatile"
_SUFFIX = ".arrow"
_TMP = ".tmp"
_META_KEY = b"kafka_direct.block"


class FileSystem:
    """The file operations of the log; a test subclass records their order."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def open_new(self, path: str) -> IO[bytes]:
        return open(path, "xb")

    def sync_file(self, handle: IO[bytes]) -> None:
        handle.flush()
        os.fsync(handle.fileno())

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def sync_dir(self, path: str) -> None:
        # A rename is durable only once the directory entry is: fsync the directory itself.
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


@dataclass(frozen=True)
class BlockMeta:
    """What a block holds: per partition, its first offset, one past its last, and its count."""

    receiver: int
    run: str
    created_ns: int
    records: int
    #: (topic, partition, first offset, last offset + 1, records), one per partition.
    ranges: tuple[tuple[str, int, int, int, int], ...]
    #: Records a share group delivered more than once (a possible repeat); 0 for consumer groups.
    redelivered: int = 0

    def offset_ranges(self) -> list[OffsetRange]:
        return [OffsetRange(t, p, first, until) for t, p, first, until, _ in self.ranges]

    def commit_offsets(self) -> dict[TopicPartition, int]:
        """The offsets to commit once the block is logged: the next one to read, per partition."""
        return {TopicPartition(t, p): until for t, p, _, until, _ in self.ranges}

    def to_json(self) -> str:
        return json.dumps(
            {
                "receiver": self.receiver,
                "run": self.run,
                "created_ns": self.created_ns,
                "records": self.records,
                "ranges": [list(r) for r in self.ranges],
                "redelivered": self.redelivered,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> BlockMeta:
        raw = json.loads(text)
        return cls(
            receiver=int(raw["receiver"]),
            run=str(raw["run"]),
            created_ns=int(raw["created_ns"]),
            records=int(raw["records"]),
            ranges=tuple(
                (str(t), int(p), int(first), int(until), int(n))
                for t, p, first, until, n in raw["ranges"]
            ),
            redelivered=int(raw.get("redelivered", 0)),
        )

    def name(self) -> str:
        """The block's file name: creation time first, so names sort oldest first."""
        return f"{self.created_ns:020d}-r{self.receiver:03d}-{uuid.uuid4().hex[:12]}{_SUFFIX}"


def volatile_dir(run: str) -> str:
    """Where a run without the WAL keeps its blocks, relative to walDir."""
    return os.path.join(VOLATILE, run)


def done_path(ref: str) -> str:
    """Where a block (``blocks/NAME`` or ``volatile/RUN/NAME``) goes once processed."""
    return os.path.join(DONE, os.path.basename(ref))


def is_block(name: str) -> bool:
    return name.endswith(_SUFFIX) and not name.startswith(".")


def is_partial(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TMP)


class BlockWriter:
    """Appends blocks to one directory of the log: ``blocks/`` (the WAL) or the run's
    ``volatile/RUN/`` (no WAL). Runs in a receiver (an executor's Python worker)."""

    def __init__(
        self,
        root: str,
        run: str,
        *,
        durable: bool,
        schema: pa.Schema,
        fs: FileSystem | None = None,
    ) -> None:
        self.root = root
        self.durable = durable
        self.schema = schema
        self.fs = fs or FileSystem()
        self.relative = BLOCKS if durable else volatile_dir(run)
        self.directory = os.path.join(root, self.relative)
        self._pending_dirs = [os.path.join(root, BLOCKS)]
        if not durable:
            self._pending_dirs.append(self.directory)
        self.fs.makedirs(self.directory)

    def append(self, batches: Sequence[pa.RecordBatch], meta: BlockMeta) -> str:
        """Write one block; when this returns, it is durable (with the WAL). Returns its path
        relative to walDir. Commit its offsets only after this returns."""
        name = meta.name()
        final = os.path.join(self.directory, name)
        partial = os.path.join(self.directory, f".{name}{_TMP}")
        handle = self.fs.open_new(partial)
        try:
            writer = pa.ipc.new_file(
                handle, self.schema, metadata={_META_KEY: meta.to_json().encode()}
            )
            for batch in batches:
                writer.write_batch(batch)
            writer.close()
            if self.durable:
                self.fs.sync_file(handle)
            else:
                handle.flush()
        except BaseException:
            handle.close()
            self.fs.remove(partial)
            raise
        handle.close()
        self.fs.rename(partial, final)
        if self.durable:
            self.fs.sync_dir(self.directory)
        return os.path.join(self.relative, name)

    def pending(self) -> int:
        """Blocks in the log not processed yet (what the pause rule counts)."""
        return sum(1 for d in self._pending_dirs for n in self.fs.listdir(d) if is_block(n))


def read_block(root: str, ref: str) -> Iterator[pa.RecordBatch]:
    """The record batches of block ``ref`` (relative to ``root``), from ``done/`` if the driver
    has marked it processed meanwhile (a DataFrame evaluated again after its batch)."""
    path = os.path.join(root, ref)
    if not os.path.exists(path):
        path = os.path.join(root, done_path(ref))
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def block_meta(path: str) -> BlockMeta:
    """A block's :class:`BlockMeta`, read from its footer only."""
    with pa.memory_map(path) as source:
        meta = pa.ipc.open_file(source).metadata or {}
    if _META_KEY not in meta:
        raise ValueError(f"{path} is not a kafka_direct block (no {_META_KEY.decode()} footer)")
    return BlockMeta.from_json(meta[_META_KEY])


def list_blocks(fs: FileSystem, directory: str) -> list[str]:
    """Complete blocks in ``directory``, oldest first."""
    return sorted(n for n in fs.listdir(directory) if is_block(n))


def remove_all(fs: FileSystem, directory: str, names: Iterable[str]) -> None:
    for name in names:
        fs.remove(os.path.join(directory, name))
