"""The share stream's driver side (kafka_direct.dstream.receiver.share_stream) without Kafka or
Spark: what start() does with the group's settings (hands the delivery limit to the receivers,
warns while a record could be archived unnamed), and how each batch names the records the
receivers rejected since the last one (only new lines are read, each named once).

The group's settings are a stub of kafka.share_groups.share_group_settings, and the receiver
stream's own start (walDir, receivers, the batch loop) is replaced by a no-op.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kafka_direct.config.share import share_stream_config
from kafka_direct.dstream.receiver.control import RejectionReader, append_rejected
from kafka_direct.dstream.receiver.share_stream import ShareKafkaStream
from kafka_direct.dstream.receiver.stream import ReceiverKafkaStream
from kafka_direct.kafka import share_groups
from kafka_direct.kafka.share_groups import ShareGroupSettings


def started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, attempts: int, limit: int
) -> ShareKafkaStream:
    settings = ShareGroupSettings(30_000, limit, "earliest")
    monkeypatch.setattr(share_groups, "share_group_settings", lambda _kafka, _group: settings)
    monkeypatch.setattr(ReceiverKafkaStream, "start", lambda _self: None)
    (tmp_path / "control").mkdir(exist_ok=True)
    config = share_stream_config(
        {"bootstrap.servers": "b:9092", "group.id": "q"},
        ["t"],
        batch_interval=1.0,
        num_receivers=2,
        wal_dir=str(tmp_path),
        max_pending_blocks=None,
        include_headers=False,
        max_delivery_attempts=attempts,
        record_check=None,
        ack_commit_interval=1.0,
        retained_batches=10,
    )
    stream = ShareKafkaStream(None, config)
    stream.foreachBatch(lambda _df, _ranges: None)
    stream.start()
    return stream


@pytest.mark.parametrize(
    ("attempts", "limit", "warns"),
    [
        pytest.param(5, 5, True, id="equal: a record dying on delivery 5 is archived unnamed"),
        pytest.param(7, 4, True, id="above the limit"),
        pytest.param(4, 5, False, id="below: delivery 5 is rejected and named"),
    ],
)
def test_start_hands_the_limit_to_the_receivers_and_warns_when_attempts_reach_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    attempts: int,
    limit: int,
    warns: bool,
) -> None:
    with caplog.at_level(logging.WARNING):
        stream = started(tmp_path, monkeypatch, attempts=attempts, limit=limit)
    assert stream.config.delivery_count_limit == limit
    assert stream.config.last_attempt == min(attempts, limit)
    text = caplog.text
    assert ("share.delivery.count.limit" in text) is warns
    if warns:
        assert f"Set maxDeliveryAttempts to {limit - 1} or less" in text


def test_each_new_rejection_is_named_once_whichever_receiver_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue: the driver sliced a name-sorted list by a running count, so receiver 1's X was
    # named again and receiver 0's later Y never.
    root = str(tmp_path)
    (tmp_path / "control").mkdir()
    append_rejected(root, "run-0", 0, {"offset": 1})  # an earlier run's: reported by it
    stream = started(tmp_path, monkeypatch, attempts=4, limit=5)
    append_rejected(root, "run-1", 1, {"offset": 10})
    with caplog.at_level(logging.WARNING):
        assert stream._new_rejections() == 1
        append_rejected(root, "run-1", 0, {"offset": 20})
        assert stream._new_rejections() == 1
        assert stream._new_rejections() == 0
    named = [r.getMessage() for r in caplog.records if "rejected after" in r.getMessage()]
    assert [m.split("@")[1].split(" ")[0] for m in named] == ["10", "20"]
    assert [e["offset"] for e in stream.rejected] == [1, 20, 10]  # every run's, kept


def test_the_rejection_reader_reads_only_complete_new_lines(tmp_path: Path) -> None:
    (tmp_path / "control").mkdir()
    path = tmp_path / "control" / "rejected-run-1-r000.jsonl"
    reader = RejectionReader(str(tmp_path))
    path.write_text('{"offset": 1}\n{"offs')  # a receiver is writing the second line
    assert reader.read_new() == [{"offset": 1}]
    with path.open("a") as f:
        f.write('et": 2}\n')
    assert reader.read_new() == [{"offset": 2}]
    assert reader.read_new() == []
