"""A Spark driver for the receiver-stream tests: runs one or more ``KafkaUtils.createStream``
streams until told to stop (or killed), each writing every record into SQLite.

Run as: python receiver_driver.py SPEC.json RUN_LABEL

The receiver tests need more task slots than the shared ``local[2]`` session has (receivers hold
slots for as long as they run), and the crash tests must kill a driver: so the driver is a
process of its own. The spec (JSON) says:

- ``bootstrap``, ``cores`` (``local[cores]``), ``control`` (a directory);
- ``streams``: each with ``name``, ``topic``, ``group``, ``receivers``, ``wal`` (bool),
  ``wal_dir``, ``batch_interval``, ``db`` (the SQLite sink), and optionally ``params`` (extra
  kafkaParams), ``max_pending_blocks``, ``max_rate``, ``block_interval``, ``slow_s`` (sleep per
  batch) and
  ``stall_after`` (once the sink holds that many rows, the batch function never returns: the
  batch is written but never marked done);
- ``share`` (a dict, optional): the stream is ``KafkaUtils.createShareStream`` instead, with
  ``max_delivery_attempts``, ``ack_commit_interval``, ``poison`` (a value ``recordCheck`` always
  refuses), ``cost_ms`` (a sleep per record in ``recordCheck``) and ``hold`` (a value on which,
  at its first delivery, ``recordCheck`` writes ``control/holding-PID`` and never returns: the
  test kills that receiver there), ``slow`` and ``slow_check_s`` (a value on whose first delivery
  ``recordCheck`` sleeps that long: past the lock; on each delivery ``slow_deliveries`` lists,
  if given), ``log_checks`` (every ``recordCheck`` call
  appends ``topic partition offset delivery_count`` to ``control/checks-PID.txt``), ``gate``
  (a name: at its first record each receiver writes ``control/GATE-first-PID`` and waits, at
  most 20 s, until the test writes ``control/GATE-open``);
- ``start_errors``: createStream arguments expected to fail at ``start()``; each error's type
  and message are written to ``control/start_errors.json``.

Each batch writes its rows into ``records`` (keyed by topic, partition, offset) and appends to
``deliveries`` (not keyed), in one transaction, so the tests count repeats. Every half second the
driver writes each stream's status to ``control/NAME.json``. Creating ``control/stop`` stops
every stream gracefully; the driver then writes the final statuses and exits.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from kafka_direct import KafkaUtils
from kafka_direct.testing.local import local_spark

#: Per stream: the schema of its first empty batch and of its first batch with rows.
SCHEMAS: dict[str, dict[str, str]] = {}


def _sink(
    name: str, db: str, run: str, stall_after: int | None, slow_s: float, stop: threading.Event
) -> Any:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS records (topic TEXT, partition INTEGER, offset INTEGER, "
            "value BLOB, PRIMARY KEY (topic, partition, offset))"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS deliveries (run TEXT, batch INTEGER, topic TEXT, "
            "partition INTEGER, offset INTEGER)"
        )
    batch = [0]

    def fn(df: Any, ranges: Any) -> None:
        rows = [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in df.select("topic", "partition", "offset", "value").collect()
        ]
        SCHEMAS.setdefault(name, {}).setdefault(
            "rows" if rows else "empty", df.schema.simpleString()
        )
        with sqlite3.connect(db) as conn:
            conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?)", rows)
            conn.executemany(
                "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?)",
                [(run, batch[0], t, p, o) for t, p, o, _ in rows],
            )
            total = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        batch[0] += 1
        if slow_s:
            time.sleep(slow_s)
        if stall_after is not None and total >= stall_after and rows:
            logging.getLogger("receiver_driver").warning("stalling in batch %d", batch[0] - 1)
            while not stop.is_set():  # written, never marked done: the test kills us here
                time.sleep(0.1)

    return fn


#: Longest a receiver waits at its ``gate``: well inside the group's 30 s record lock.
GATE_TIMEOUT_S = 20.0


def _record_check(share: dict[str, Any], control: str) -> Any:
    poison, hold, slow = share.get("poison"), share.get("hold"), share.get("slow")
    cost_ms, slow_s = float(share.get("cost_ms", 0)), float(share.get("slow_check_s", 0))
    slow_on = set(share.get("slow_deliveries", [1]))
    log_checks = bool(share.get("log_checks"))
    gate = share.get("gate")  # a name: each receiver waits at its first record (see below)
    passed: list[bool] = []

    def wait_at_gate() -> None:
        # The receiver announces its first record (control/GATE-first-PID), then holds it until
        # the test opens the gate (control/GATE-open): the test produces one wave of records
        # per receiver, each taken by a receiver not yet held, so every receiver gets records.
        with open(os.path.join(control, f"{gate}-first-{os.getpid()}"), "w") as f:
            f.write("held")
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while not os.path.exists(os.path.join(control, f"{gate}-open")):
            if time.monotonic() > deadline:
                break  # the test fails on its own wait; never hold records past their lock
            time.sleep(0.05)
        passed.append(True)

    def check(record: Any) -> None:
        if gate and not passed:
            wait_at_gate()
        if log_checks:  # one short O_APPEND write a call: whole lines even across processes
            with open(os.path.join(control, f"checks-{os.getpid()}.txt"), "a") as f:
                line = f"{record.topic} {record.partition} {record.offset} {record.delivery_count}"
                f.write(line + "\n")
        if cost_ms:
            time.sleep(cost_ms / 1000)  # work per record, done in the receivers
        value = (record.value or b"").decode()
        if value == poison:
            raise ValueError(f"cannot parse {value!r}")
        if value == slow and record.delivery_count in slow_on:
            time.sleep(slow_s)  # past the lock: the whole poll is handed on
        if value == hold and record.delivery_count == 1:
            with open(os.path.join(control, f"holding-{os.getpid()}"), "w") as f:
                f.write(str(record.offset))
            while True:  # the test SIGKILLs this Python worker here
                time.sleep(1)

    return check


def _share_stream(spark: Any, spec: dict[str, Any], s: dict[str, Any], control: str) -> Any:
    share = s["share"]
    return KafkaUtils.createShareStream(
        spark,
        {"bootstrap.servers": spec["bootstrap"], "group.id": s["group"], **s.get("params", {})},
        [s["topic"]],
        batchInterval=s.get("batch_interval", 0.5),
        walDir=s["wal_dir"],
        numReceivers=s["receivers"],
        maxDeliveryAttempts=share.get("max_delivery_attempts", 5),
        ackCommitInterval=share.get("ack_commit_interval", 1.0),
        maxPendingBlocks=s.get("max_pending_blocks"),
        recordCheck=_record_check(share, control),
    )


def _status(name: str, stream: Any) -> dict[str, Any]:
    error = stream.exception()
    share = {}
    if hasattr(stream, "rejected"):
        share = {
            "rejected": stream.rejected,
            "rejected_records": sum(b.rejected_records for b in stream.batches),
            "redelivered": sum(b.redelivered_records for b in stream.batches),
            "lock_expired": sum(b.lock_expired_records for b in stream.batches),
            "ack_refused": sum(b.ack_refused_records for b in stream.batches),
        }
    return {
        **share,
        "schemas": SCHEMAS.get(name, {}),
        "batches": len(stream.batches),
        "records": sum(b.num_records for b in stream.batches),
        "blocks": sum(b.blocks for b in stream.batches),
        "recovered_blocks": sum(b.recovered_blocks for b in stream.batches),
        "paused_batches": sum(1 for b in stream.batches if b.paused_receivers),
        "receivers": [asdict(s) for s in stream.receivers],
        "restarts": stream.receiver_restarts,
        "recovery": asdict(stream.recovery) if stream.recovery is not None else None,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "active": stream.isActive,
        "wal_dir": stream.wal_dir,
    }


def _write(path: str, data: Any) -> None:
    with open(path + ".part", "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(path + ".part", path)


def main(spec_path: str, run: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("kafka_direct.dstream").setLevel(logging.INFO)
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    control = spec["control"]
    os.makedirs(control, exist_ok=True)
    spark = local_spark(f"receiver-driver-{run}", cores=int(spec["cores"]))
    logging.getLogger("receiver_driver").warning("Spark is up")
    stop = threading.Event()

    errors = []
    for case in spec.get("start_errors", []):
        try:
            bad = KafkaUtils.createStream(spark, **case["kwargs"])
            bad.foreachBatch(lambda df, ranges: None)
            bad.start()
            bad.stop()
            errors.append({"name": case["name"], "type": None, "message": "started"})
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            errors.append({"name": case["name"], "type": type(exc).__name__, "message": str(exc)})
    if errors:
        _write(os.path.join(control, "start_errors.json"), errors)

    streams = {}
    for s in spec["streams"]:
        if "share" in s:
            stream = _share_stream(spark, spec, s, control)
            stream.foreachBatch(
                _sink(
                    s["name"], s["db"], run, s.get("stall_after"), float(s.get("slow_s", 0)), stop
                )
            )
            streams[s["name"]] = stream
            continue
        params = {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": s["group"],
            "auto.offset.reset": "earliest",
            # Tansu's first join waits half the session timeout (BROKER.md's group notes).
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "500",
            **s.get("params", {}),
        }
        stream = KafkaUtils.createStream(
            spark,
            params,
            [s["topic"]],
            batchInterval=s.get("batch_interval", 0.5),
            numReceivers=s["receivers"],
            writeAheadLog=s["wal"],
            walDir=s.get("wal_dir"),
            maxPendingBlocks=s.get("max_pending_blocks"),
            maxRatePerReceiver=s.get("max_rate"),
            blockInterval=s.get("block_interval", 0.2),
        )
        stream.foreachBatch(
            _sink(s["name"], s["db"], run, s.get("stall_after"), float(s.get("slow_s", 0)), stop)
        )
        streams[s["name"]] = stream
    for stream in streams.values():
        stream.start()

    stop_file = os.path.join(control, "stop")
    while not os.path.exists(stop_file):
        for name, stream in streams.items():
            _write(os.path.join(control, f"{name}.json"), _status(name, stream))
        time.sleep(0.5)
    stop.set()
    stoppers = [
        threading.Thread(target=stream.stop, kwargs={"graceful": True})
        for stream in streams.values()
    ]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join()
    for name, stream in streams.items():
        _write(os.path.join(control, f"{name}.json"), {**_status(name, stream), "final": True})
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
