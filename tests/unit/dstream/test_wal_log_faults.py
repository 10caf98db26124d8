"""The driver's side of the write-ahead log (kafka_direct.dstream.receiver.wal_log) when what is
in walDir would otherwise stop every start: a block whose offset ranges run backwards or whose
footer cannot be read, a block marked done by another run meanwhile, a stream.json cut short.

No broker, no Spark: blocks are written to tmp_path as a receiver writes them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import IO

import pytest

from kafka_direct.consumer.rows import ARROW_SCHEMA
from kafka_direct.dstream.receiver.progress import merge_ranges
from kafka_direct.dstream.receiver.wal import BlockWriter
from kafka_direct.dstream.receiver.wal_log import BlockLog
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange
from tests.unit.dstream.test_wal import RecordingFs, batch, meta


def test_a_block_whose_ranges_run_backwards_is_processed_with_ranges_from_its_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue: a receiver (before the fix) logged t-0 [100, 61) for records 100..103 and 50..60;
    # the driver's batch planning raised at every restart.
    writer = BlockWriter(str(tmp_path), "r1", durable=True, schema=ARROW_SCHEMA)
    writer.append([batch(4, 100), batch(11, 50)], meta(15, (("t", 0, 100, 61, 15),)))
    log = BlockLog(str(tmp_path), "r2", durable=True)
    log.prepare("g", ["t"])
    with caplog.at_level(logging.WARNING):
        [block] = log.pending()
    assert block.meta.ranges == (("t", 0, 50, 104, 15),)
    assert merge_ranges(block.meta.offset_ranges()) == [OffsetRange("t", 0, 50, 104)]
    assert "t-0 [100, 61)" in caplog.text and "taken from its records" in caplog.text


def test_a_block_whose_footer_cannot_be_read_is_moved_aside_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = BlockLog(str(tmp_path), "r1", durable=True)
    log.prepare("g", ["t"])
    writer = BlockWriter(str(tmp_path), "r1", durable=True, schema=ARROW_SCHEMA)
    good = writer.append([batch(2)], meta(2, (("t", 0, 0, 2, 2),)))
    (tmp_path / "blocks" / "00000000000000000001-r000-bad.arrow").write_bytes(b"not arrow")
    with caplog.at_level(logging.WARNING):
        assert [b.ref for b in log.pending()] == [good]
    assert os.listdir(tmp_path / "invalid") == ["00000000000000000001-r000-bad.arrow"]
    assert "cannot be processed" in caplog.text and "invalid" in caplog.text


def test_a_block_another_run_marked_done_first_is_left_to_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue: the run that took the directory over processed the same block; the older run's
    # mark_done then raised FileNotFoundError after its batch function had succeeded.
    older = BlockLog(str(tmp_path), "A", durable=True)
    older.prepare("g", ["t"])
    writer = BlockWriter(str(tmp_path), "A", durable=True, schema=ARROW_SCHEMA)
    writer.append([batch(1)], meta(1, (("t", 0, 0, 1, 1),)))
    writer.append([batch(1, 1)], meta(1, (("t", 0, 1, 2, 1),)))
    a_batch = older.pending()
    newer = BlockLog(str(tmp_path), "B", durable=True)
    b_batch = newer.pending()[:1]
    newer.mark_done(b_batch)
    with caplog.at_level(logging.WARNING):
        done = older.mark_done(a_batch)
    assert [os.path.basename(d) for d in done] == [os.path.basename(a_batch[1].ref)]
    assert "marked done by another run" in caplog.text


def test_a_stream_json_cut_short_stops_the_start_naming_the_file_and_the_fix(
    tmp_path: Path,
) -> None:
    BlockLog(str(tmp_path), "r1", durable=True).prepare("g", ["t"])
    identity = tmp_path / "stream.json"
    identity.write_text(identity.read_text()[:10])  # a crash while it was rewritten in place
    with pytest.raises(ConfigurationError) as info:
        BlockLog(str(tmp_path), "r2", durable=True).prepare("g", ["t"])
    message = str(info.value)
    assert info.value.option == "walDir" and str(identity) in message
    assert "JSONDecodeError" in message and "delete that file and start again" in message


def test_stream_json_is_replaced_whole_and_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    BlockLog(str(tmp_path), "r1", durable=True, fs=RecordingFs(events)).prepare("g", ["t"])
    assert ("fsync-dir", os.path.basename(tmp_path)) in events
    before = (tmp_path / "stream.json").read_text()

    def crash(data: object, f: IO[str]) -> None:
        f.write('{"format": 1, "gr')  # the driver dies in the middle of the write
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(json, "dump", crash)
    with pytest.raises(ConfigurationError, match="Input/output error"):
        BlockLog(str(tmp_path), "r2", durable=True).prepare("g", ["t"])
    assert (tmp_path / "stream.json").read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["blocks", "control", "done", "stream.json"]
