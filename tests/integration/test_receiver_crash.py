"""The driver is SIGKILLed mid-stream, then restarted on the same walDir and group: with the
write-ahead log nothing is lost (and the repeats are counted); without it, what was received
but not processed is lost, as Spark's guide warns for receivers.

The loss is made certain, not left to timing: 100 records are produced, and the batch function
stalls (rows written, batch never marked done) once the sink holds them. Only then are 300 more
produced, which the receiver logs and commits while the batch function is stuck; the driver is
killed once the group has committed all 400. So at the kill every record has been received and
committed, and the last 300 have certainly not been processed.

Both scenarios run at the same time (two drivers each, one after the other), to share the
drivers' start-up time.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.kafka.groups import fetch_group_offsets
from tests.integration.kafka_helpers import Record, create_topic, new_topic_name, produce_known
from tests.integration.receiver_apps import App, deliveries, sink_rows

# Timing-sensitive or CPU-heavy: runs alone, after the parallel part (scripts/test.sh).
pytestmark = pytest.mark.serial

TOTAL = 400


def _committed(bootstrap: str, group: str) -> int:
    return sum(fetch_group_offsets({"bootstrap.servers": bootstrap}, group).values())


def _spec(bootstrap: str, topic: str, work: Path, wal: bool, stall: bool) -> dict[str, Any]:
    return {
        "bootstrap": bootstrap,
        "cores": 3,
        "streams": [
            {
                "name": "s",
                "topic": topic,
                "group": f"g-{topic}",
                "receivers": 1,
                "wal": wal,
                "wal_dir": str(work / "wal"),
                "batch_interval": 0.5,
                "db": str(work / "sink.db"),
                "stall_after": 100 if stall else None,
            }
        ],
    }


def _last_batch_size(db: Path, run: str) -> int:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM deliveries WHERE run = ? AND batch = "
            "(SELECT max(batch) FROM deliveries WHERE run = ?)",
            (run, run),
        ).fetchone()
    return int(row[0])


def _crash_and_restart(bootstrap: str, work: Path, wal: bool) -> dict[str, Any]:
    topic = new_topic_name("rcv-crash")
    create_topic(bootstrap, topic, partitions=4)
    produced: list[Record] = produce_known(bootstrap, topic, per_partition=25, partitions=4)
    group, db = f"g-{topic}", work / "sink.db"

    first = App(work, "first", _spec(bootstrap, topic, work, wal, stall=True)).start()
    try:
        first.wait(lambda: "stalling" in first.log.read_text(), "the stalled batch", 300)
        produced += produce_known(bootstrap, topic, 75, partitions=4, start_index=25)
        first.wait(lambda: _committed(bootstrap, group) == TOTAL, "every record committed")
    finally:
        first.kill()
    processed, stalled = sink_rows(db), deliveries(db)

    second = App(work, "second", _spec(bootstrap, topic, work, wal, stall=False)).start()
    try:
        if wal:
            second.wait_rows(db, TOTAL)
        else:
            # The new receiver has joined, and batches have run since: nothing more will come.
            def settled() -> bool:
                status = second.status("s") or {}
                receivers = status.get("receivers") or [{}]
                return bool(receivers[0].get("assignment")) and status.get("batches", 0) >= 4

            second.wait(settled, "the restarted receiver's assignment, then batches")
        second.stop()
    except BaseException:
        second.kill()
        raise
    return {
        "produced": produced,
        "processed_at_kill": processed,
        "delivered_at_kill": stalled,
        "stalled_batch": _last_batch_size(db, "run1"),
        "rows": sink_rows(db),
        "deliveries": deliveries(db),
        "committed": _committed(bootstrap, group),
        "final": second.status("s"),
    }


@pytest.fixture(scope="module")
def crashes(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Any]:
    results: dict[bool, Any] = {}

    def scenario(wal: bool) -> None:
        work = tmp_path_factory.mktemp("wal" if wal else "nowal")
        try:
            results[wal] = _crash_and_restart(kafka_bootstrap, work, wal)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test that needs it
            results[wal] = exc

    threads = [threading.Thread(target=scenario, args=(wal,)) for wal in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _result(crashes: dict[bool, Any], wal: bool) -> dict[str, Any]:
    result = crashes[wal]
    if isinstance(result, BaseException):
        raise result
    assert len(result["processed_at_kill"]) == 100  # killed with 300 received, unprocessed
    assert result["delivered_at_kill"] == 100
    final = result["final"]
    assert final is not None and final["error"] is None
    assert result["committed"] == TOTAL  # the group says: everything was read
    return result


def test_with_the_wal_nothing_is_lost_and_the_repeats_are_counted(crashes: dict[bool, Any]) -> None:
    result = _result(crashes, wal=True)
    recovery = result["final"]["recovery"]
    expected = sorted((r.topic, r.partition, r.offset, r.value) for r in result["produced"])
    assert result["rows"] == expected  # nothing lost
    repeats = result["deliveries"] - TOTAL
    print(
        f"\nWAL: {repeats} repeated record(s) after the crash; the restart found "
        f"{recovery['leftover_blocks']} logged block(s) ({recovery['leftover_records']} records)"
    )
    # The stalled batch was written but never marked done: its blocks ran again first, and
    # nothing else repeated.
    assert repeats == result["stalled_batch"] > 0
    assert recovery["leftover_records"] == TOTAL - 100 + repeats
    assert result["final"]["recovered_blocks"] == recovery["leftover_blocks"]


def test_without_the_wal_what_was_received_and_not_processed_is_lost(
    crashes: dict[bool, Any],
) -> None:
    result = _result(crashes, wal=False)
    recovery = result["final"]["recovery"]
    lost = TOTAL - len(result["rows"])
    print(
        f"\nno WAL: {lost} record(s) lost after the crash; the restart discarded "
        f"{recovery['discarded_blocks']} block(s) ({recovery['discarded_records']} records)"
    )
    assert result["rows"] == result["processed_at_kill"]  # the restart added nothing...
    assert lost == TOTAL - 100 == 300  # ...so the 300 received and unprocessed are gone
    assert recovery["discarded_records"] == lost + result["stalled_batch"]
    assert result["deliveries"] == 100
