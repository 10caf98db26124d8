"""LagListener: lag from progress events, and data loss from the stream readers' journal,
attributed to the batch by its start offsets. No Spark session: events are plain objects."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kafka_direct.offsets import OffsetRange, TopicPartition
from kafka_direct.planning.data_loss import DataLoss, LossLedger
from kafka_direct.planning.resolve import resolve_new_partitions
from kafka_direct.source import loss_journal
from kafka_direct.source.listener import LagListener, LagReport, offsets_behind_latest
from kafka_direct.source.loss_journal import JournalReader

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def event(batch: int, start: dict[str, Any], end: dict[str, Any], latest: dict[str, Any]) -> Any:
    source = SimpleNamespace(
        startOffset=json.dumps(start), endOffset=json.dumps(end), latestOffset=json.dumps(latest)
    )
    progress = SimpleNamespace(id="q-1", name="orders", batchId=batch, sources=[source])
    return SimpleNamespace(progress=progress)


@pytest.fixture()
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(loss_journal.JOURNAL_DIR_ENV, str(tmp_path))
    return tmp_path


def test_lag_per_partition_ignores_placeholders_and_other_sources() -> None:
    assert offsets_behind_latest('{"t": {"0": 5, "1": -1}}', '{"t": {"0": 9, "1": 4}}') == {T0: 4}
    assert offsets_behind_latest('{"not": "kafka"}', '{"t": {"0": 1}}') == {}
    assert offsets_behind_latest(None, '{"t": {"0": 1}}') == {}


def test_a_batchs_data_loss_reaches_the_report_once(journal: Path) -> None:
    reports: list[LagReport] = []
    listener = LagListener(reports.append, JournalReader(journal))
    loss = DataLoss(T0, "offset_out_of_range", 100, 600, "gone")
    loss_journal.record(loss, 500)
    listener.onQueryProgress(event(7, {"t": {"0": 100, "1": 3}}, {"t": {"0": 900, "1": 3}},
                                   {"t": {"0": 1000, "1": 3}}))  # fmt: skip
    listener.onQueryProgress(event(8, {"t": {"0": 900, "1": 3}}, {"t": {"0": 1000, "1": 3}},
                                   {"t": {"0": 1000, "1": 3}}))  # fmt: skip
    assert [(r.batch_id, dict(r.lost)) for r in reports] == [(7, {T0: 500}), (8, {})]
    assert reports[0].per_partition == {T0: 100, T1: 0}


def test_an_entry_of_another_query_waits_for_its_own_progress(journal: Path) -> None:
    reports: list[LagReport] = []
    listener = LagListener(reports.append, JournalReader(journal))
    loss_journal.record(DataLoss(T1, "offset_out_of_range", 40, 45, "gone"), 5)
    listener.onQueryProgress(event(1, {"t": {"0": 0}}, {"t": {"0": 2}}, {"t": {"0": 2}}))
    listener.onQueryProgress(event(2, {"t": {"1": 40}}, {"t": {"1": 50}}, {"t": {"1": 50}}))
    assert [dict(r.lost) for r in reports] == [{}, {T1: 5}]


def test_the_reader_reads_only_whole_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "data-loss-1.jsonl"
    whole = json.dumps({"topic": "t", "partition": 0, "kind": "offset_out_of_range",
                        "expected": 1, "available": 3, "lost": 2, "time": 0.0})  # fmt: skip
    path.write_text(whole + "\n" + whole[:10])  # a line still being written
    reader = JournalReader(tmp_path)
    assert [e.lost for e in reader.new_entries()] == [2]
    assert reader.new_entries() == []
    with open(path, "a", encoding="utf-8") as out:
        out.write(whole[10:] + "\n")
    assert [e.expected for e in reader.new_entries()] == [1]


def test_recording_never_fails_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(loss_journal.JOURNAL_DIR_ENV, str(blocked / "sub"))
    loss_journal.record(DataLoss(T0, "offset_out_of_range", 1, 2, "gone"), 1)  # no exception


def test_an_executors_skip_inside_the_batch_is_counted_once_with_that_batch(
    journal: Path,
) -> None:
    reports: list[LagReport] = []
    listener = LagListener(reports.append, JournalReader(journal))
    # Batch 2 read [20, 30) of partition 0; its task found [20, 30) deleted (twice: retried).
    for _attempt in range(2):
        loss_journal.record_skip(OffsetRange("t", 0, 20, 30), 20, 30)
    # Batch 3's planning found [30, 150) deleted too.
    loss_journal.record(DataLoss(T0, "offset_out_of_range", 30, 150, "gone"), 120)
    listener.onQueryProgress(event(2, {"t": {"0": 20}}, {"t": {"0": 30}}, {"t": {"0": 200}}))
    listener.onQueryProgress(event(3, {"t": {"0": 30}}, {"t": {"0": 160}}, {"t": {"0": 200}}))
    assert [(r.batch_id, dict(r.lost)) for r in reports] == [(2, {T0: 10}), (3, {T0: 120})]


def test_an_added_partitions_loss_reaches_the_batch_that_reads_it_first(journal: Path) -> None:
    # Regression (review): the planner's entry for a new partition names offset 0, but the
    # batch's start offsets lack the partition, so the entry was dropped after PENDING_S.
    reports: list[LagReport] = []
    listener = LagListener(reports.append, JournalReader(journal))
    ledger = LossLedger(loss_journal.record)
    resolve_new_partitions([T1], {T1: 4}, fail_on_data_loss=False, ledger=ledger)
    assert ledger.lost == {T1: 4}  # offsets 0-3 went before the partition was found
    listener.onQueryProgress(event(5, {"t": {"0": 5}}, {"t": {"0": 6, "1": 9}},
                                   {"t": {"0": 6, "1": 9}}))  # fmt: skip
    assert [(r.batch_id, dict(r.lost)) for r in reports] == [(5, {T1: 4})]
