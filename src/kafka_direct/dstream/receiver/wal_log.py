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
(and fsyncs, with the WAL: a block marked done must stay done after a crash, or it repeats); a
block already gone from ``blocks/`` (a run that took the directory over marked it done first)
is left to that run. :meth:`BlockLog.purge_done` deletes them one batch later, so a DataFrame
that Spark evaluates again just after its batch still finds its files.

A block that would fail every batch, and so every restart, is never handed to one
(:meth:`BlockLog.pending`): offset ranges that are not ranges (``from > until``, written by a
receiver before ranges were built from each partition's lowest and highest offset) are taken
from its records instead, and a block whose footer cannot be read is moved to ``invalid/``,
with a warning naming it.

``stream.json`` is replaced atomically (written aside, fsynced, renamed), so a crash never
leaves it cut short; one that cannot be read stops the start with an error naming it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    read_block,
    remove_all,
    volatile_dir,
)
from kafka_direct.errors import ConfigurationError

__all__ = ["BlockLog", "PendingBlock", "Recovery"]

log = logging.getLogger(__name__)

_IDENTITY = "stream.json"
#: Where a block that no batch could read is moved, relative to walDir.
INVALID = "invalid"


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
                found = self._identity(identity)
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
            self._write_identity(
                identity, {"format": 1, "group": group, "topics": list(topics), "headers": headers}
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

    def _identity(self, path: str) -> dict[str, Any]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            found = json.loads(text)
            problem = "" if isinstance(found, dict) else "it is not a JSON object"
        except ValueError as exc:
            found, problem = None, f"{type(exc).__name__}: {exc}"
        if problem:
            raise ConfigurationError(
                "walDir",
                self.root,
                f"a directory whose {_IDENTITY} holds what a stream wrote there",
                f"{path} cannot be read ({problem}): it was cut short or changed by hand. It "
                "only records which group the log belongs to: if this walDir is this stream's, "
                "delete that file and start again (the blocks are kept); else pass another "
                "walDir.",
            )
        assert isinstance(found, dict)
        return found

    def _write_identity(self, path: str, data: dict[str, Any]) -> None:
        # Aside, fsynced, renamed: a crash leaves the old file or the new one, never half.
        partial = f"{path}.{uuid.uuid4().hex[:8]}.part"
        try:
            with open(partial, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except BaseException:
            self.fs.remove(partial)
            raise
        if self.durable:
            self.fs.sync_dir(self.root)

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
        """Every complete block not processed yet, oldest first (module docstring: a block
        that would fail every batch is repaired or set aside, never returned as it is)."""
        found: list[PendingBlock] = []
        for sub in self._dirs:
            for name in list_blocks(self.fs, os.path.join(self.root, sub)):
                ref = os.path.join(sub, name)
                try:
                    meta = block_meta(os.path.join(self.root, ref))
                except FileNotFoundError:
                    continue  # marked done between the listing and now (a final batch)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    self._set_aside(ref, f"its footer cannot be read: {type(exc).__name__}: {exc}")
                    continue
                checked = self._checked(ref, meta)
                if checked is not None:
                    found.append(PendingBlock(ref, checked))
        return sorted(found, key=lambda b: os.path.basename(b.ref))

    def _checked(self, ref: str, meta: BlockMeta) -> BlockMeta | None:
        """``meta``, with its ranges taken from the block's records if they are not ranges."""
        if all(0 <= first <= until for _, _, first, until, _ in meta.ranges):
            return meta
        shown = ", ".join(f"{t}-{p} [{first}, {until})" for t, p, first, until, _ in meta.ranges)
        try:
            ranges = _ranges_of_rows(self.root, ref)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._set_aside(ref, f"its offset ranges ({shown}) are not ranges and its records "
                            f"cannot be read: {type(exc).__name__}: {exc}")  # fmt: skip
            return None
        log.warning(
            "walDir %s: block %s says its offset ranges are %s, which are not ranges (a "
            "receiver logged it while a rebalance moved a partition under it); taken from its "
            "records instead, and processed",
            self.root,
            ref,
            shown,
        )
        return dataclasses.replace(meta, ranges=ranges)

    def _set_aside(self, ref: str, why: str) -> None:
        target = os.path.join(INVALID, os.path.basename(ref))
        try:
            self.fs.makedirs(os.path.join(self.root, INVALID))
            self.fs.rename(os.path.join(self.root, ref), os.path.join(self.root, target))
        except FileNotFoundError:
            return  # another run moved it first
        log.warning(
            "walDir %s: block %s cannot be processed (%s); moved to %s so that batches go on. "
            "Its offsets were committed when it was logged, so Kafka will not deliver its "
            "records again: read what is left of it (an Arrow IPC file) with "
            "pyarrow.ipc.open_file if they are needed.",
            self.root,
            ref,
            why,
            target,
        )

    def mark_done(self, blocks: Sequence[PendingBlock]) -> list[str]:
        """Move processed blocks to ``done/``; returns their new paths (for :meth:`purge_done`).
        A block no longer in the log was marked done by a run that took the directory over
        while this one's batch ran: left to it, with a warning."""
        moved = []
        for block in blocks:
            target = done_path(block.ref)
            try:
                self.fs.rename(os.path.join(self.root, block.ref), os.path.join(self.root, target))
            except FileNotFoundError:
                log.warning(
                    "walDir %s: block %s was marked done by another run of the stream (it took "
                    "the directory over while this batch ran); its records may have been "
                    "processed twice",
                    self.root,
                    block.ref,
                )
                continue
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


def _ranges_of_rows(root: str, ref: str) -> tuple[tuple[str, int, int, int, int], ...]:
    """(topic, partition, lowest offset, highest + 1, records) per partition, from the rows."""
    seen: dict[tuple[str, int], list[int]] = {}
    for batch in read_block(root, ref):
        rows = zip(
            batch.column("topic").to_pylist(),
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            strict=True,
        )
        for topic, partition, offset in rows:
            tp = seen.setdefault((topic, partition), [offset, offset + 1, 0])
            tp[0], tp[1], tp[2] = min(tp[0], offset), max(tp[1], offset + 1), tp[2] + 1
    return tuple((t, p, r[0], r[1], r[2]) for (t, p), r in sorted(seen.items()))


def _records(path: str) -> int:
    try:
        return block_meta(path).records
    except (OSError, ValueError):
        return 0  # a block cut short by the crash: its count is unknown
