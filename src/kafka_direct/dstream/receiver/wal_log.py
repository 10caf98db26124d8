"""The Spark driver's side of the write-ahead log: claim the directory, recover it at start, list
the blocks a batch takes, mark them done and delete them later. Runs in the Spark driver (plain
file I/O, no Spark, no Kafka client). The format and the receivers' append are in
:mod:`~kafka_direct.dstream.receiver.wal`.

At start (:meth:`BlockLog.recover`):

- partial blocks (``blocks/.NAME.tmp``) are removed: a receiver died while writing them, before
  it committed their offsets, so Kafka delivers their records again;
- ``volatile/`` is removed: blocks that a run without the WAL received, committed and never
  processed. Their records are lost; this is the receiver approach's documented loss without a
  WAL, and the count is logged;
- leftover ``done/`` blocks are deleted;
- the blocks still in ``blocks/`` were logged and committed but not processed. They are the first
  batch's, which is where repeats after a crash come from (at-least-once).

After a batch's function returns, :meth:`BlockLog.mark_done` renames its blocks into ``done/``
(and fsyncs, with the WAL: a block marked done must stay done after a crash, or it repeats).
:meth:`BlockLog.purge_done` deletes them one batch later, so a DataFrame that Spark evaluates
again just after its batch still finds its files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from kafka_direct.dstream.receiver.wal import (
    BLOCKS,
    DONE,
    VOLATILE,
    BlockMeta,
    FileSystem,
    block_meta,
    done_path,
    is_partial,
    list_blocks,
    remove_all,
    volatile_dir,
)
from kafka_direct.errors import ConfigurationError

__all__ = ["BlockLog", "PendingBlock", "Recovery"]

log = logging.getLogger(__name__)

_IDENTITY = "stream.json"


@dataclass(frozen=True)
class PendingBlock:
    ref: str  # relative to walDir: blocks/NAME or volatile/RUN/NAME
    meta: BlockMeta


@dataclass(frozen=True)
class Recovery:
    """What :meth:`BlockLog.recover` found from earlier runs."""

    leftover_blocks: int  # logged, not processed: the first batch processes them (repeats)
    leftover_records: int
    discarded_blocks: int  # received without the WAL and never processed: lost
    discarded_records: int
    partial_blocks: int  # never committed: Kafka delivers them again


class BlockLog:
    """One stream's ``walDir``, as the driver sees it."""

    def __init__(self, root: str, run: str, *, durable: bool, fs: FileSystem | None = None):
        self.root = root
        self.run = run
        self.durable = durable
        self.fs = fs or FileSystem()
        self._dirs = [BLOCKS] + ([] if durable else [volatile_dir(run)])

    def prepare(self, group: str, topics: Sequence[str], headers: bool = False) -> None:
        """Create the layout, refuse a directory that holds another group's log (or blocks
        written with the other ``includeHeaders``), and check the driver can write here.
        Raises :class:`ConfigurationError` naming ``walDir`` or ``includeHeaders``."""
        try:
            for sub in (BLOCKS, DONE, "control", *self._dirs):
                self.fs.makedirs(os.path.join(self.root, sub))
            identity = os.path.join(self.root, _IDENTITY)
            if os.path.exists(identity):
                with open(identity, encoding="utf-8") as f:
                    found = json.load(f)
                owner = found.get("group")
                written = found.get("headers")
                if written is not None and bool(written) != headers and self.pending():
                    # Left-over blocks carry the columns they were written with: one batch
                    # over both kinds fails, at every restart.
                    raise ConfigurationError(
                        "includeHeaders",
                        headers,
                        f"{bool(written)}, as when the blocks left in {self.root} were logged",
                        "Restart with that setting until they are processed, then change it.",
                    )
                if owner != group:
                    raise ConfigurationError(
                        "walDir",
                        self.root,
                        f"a directory of group '{group}' (or a new one)",
                        f"It holds the write-ahead log of group '{owner}', whose blocks this "
                        "stream must not process. Pass another walDir, or delete this one if "
                        "that stream's unprocessed records are no longer needed.",
                    )
            with open(identity, "w", encoding="utf-8") as f:
                json.dump(
                    {"format": 1, "group": group, "topics": list(topics), "headers": headers}, f
                )
        except OSError as exc:
            raise ConfigurationError(
                "walDir",
                self.root,
                "a directory the driver can create and write",
                f"The driver could not write there: {type(exc).__name__}: {exc}. Check the "
                "path and its permissions (the driver, the receivers and the batch tasks all "
                "write or read it).",
            ) from exc

    def recover(self) -> Recovery:
        """Clean up after earlier runs (see the module docstring); what was found."""
        blocks = os.path.join(self.root, BLOCKS)
        partial = [n for n in self.fs.listdir(blocks) if is_partial(n)]
        remove_all(self.fs, blocks, partial)
        discarded = records = 0
        volatile = os.path.join(self.root, VOLATILE)
        for run in self.fs.listdir(volatile):
            if run == self.run:
                continue
            directory = os.path.join(volatile, run)
            for name in list_blocks(self.fs, directory):
                discarded += 1
                records += _records(os.path.join(directory, name))
            shutil.rmtree(directory, ignore_errors=True)
        done = os.path.join(self.root, DONE)
        remove_all(self.fs, done, self.fs.listdir(done))
        left = self.pending()
        found = Recovery(
            leftover_blocks=len(left),
            leftover_records=sum(b.meta.records for b in left),
            discarded_blocks=discarded,
            discarded_records=records,
            partial_blocks=len(partial),
        )
        if found.discarded_blocks:
            log.warning(
                "walDir %s: discarded %d block(s) (%d records) that an earlier run without the "
                "write-ahead log had received, committed to the group and not processed: those "
                "records are lost (writeAheadLog=False)",
                self.root,
                found.discarded_blocks,
                found.discarded_records,
            )
        if found.leftover_blocks:
            log.info(
                "walDir %s: %d logged block(s) (%d records) of an earlier run were not processed; "
                "the first batch processes them (they may repeat what that run's last batch did)",
                self.root,
                found.leftover_blocks,
                found.leftover_records,
            )
        return found

    def pending(self) -> list[PendingBlock]:
        """Every complete block not processed yet, oldest first."""
        found: list[PendingBlock] = []
        for sub in self._dirs:
            for name in list_blocks(self.fs, os.path.join(self.root, sub)):
                ref = os.path.join(sub, name)
                try:
                    meta = block_meta(os.path.join(self.root, ref))
                except FileNotFoundError:
                    continue  # marked done between the listing and now (a final batch)
                found.append(PendingBlock(ref, meta))
        return sorted(found, key=lambda b: os.path.basename(b.ref))

    def mark_done(self, blocks: Sequence[PendingBlock]) -> list[str]:
        """Move processed blocks to ``done/``; returns their new paths (for :meth:`purge_done`)."""
        moved = []
        for block in blocks:
            target = done_path(block.ref)
            self.fs.rename(os.path.join(self.root, block.ref), os.path.join(self.root, target))
            moved.append(target)
        if self.durable and moved:
            # Both entries must be durable: a block still listed in blocks/ repeats after a crash.
            self.fs.sync_dir(os.path.join(self.root, BLOCKS))
            self.fs.sync_dir(os.path.join(self.root, DONE))
        return moved

    def purge_done(self, refs: Sequence[str]) -> None:
        for ref in refs:
            self.fs.remove(os.path.join(self.root, ref))

    def discard_run(self) -> None:
        """Remove this run's volatile blocks (a stream without the WAL, at its end)."""
        if not self.durable:
            shutil.rmtree(os.path.join(self.root, volatile_dir(self.run)), ignore_errors=True)


def _records(path: str) -> int:
    try:
        return block_meta(path).records
    except (OSError, ValueError):
        return 0  # a block cut short by the crash: its count is unknown
