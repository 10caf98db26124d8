"""The receiver stream (KafkaUtils.createStream) on the real broker and a real local Spark: exact
output with one and with two receivers, without the WAL, a receiver that dies and is restarted,
and the errors ``start()`` raises.

Receivers hold task slots for as long as they run, so these streams run in a driver of their own
(``receiver_driver.py``) on ``local[7]``: four streams at once (five receivers), in one
application, so the JVM starts once. Every stream has its own topic, group and walDir.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.offsets import TopicPartition
from tests.integration.kafka_helpers import Record, create_topic, new_topic_name, produce_known
from tests.integration.receiver_apps import App, deliveries, sink_rows

# Timing-sensitive or CPU-heavy: runs alone, after the parallel part (scripts/test.sh).
pytestmark = pytest.mark.serial

SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)


def expected(records: list[Record]) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, r.value) for r in records)


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One application, four streams; returns what the tests check."""
    work = tmp_path_factory.mktemp("receivers")
    topics = {name: new_topic_name(f"rcv-{name}") for name in ("one", "two", "nowal", "restart")}
    for name, topic in topics.items():
        create_topic(kafka_bootstrap, topic, partitions=2 if name == "restart" else 4)
    # The two-receiver stream's records are produced once both receivers hold partitions: on
    # Kafka the first member to join would otherwise read them all before the second arrives.
    produced = {
        name: produce_known(kafka_bootstrap, topic, per_partition=250, partitions=4)
        for name, topic in topics.items()
        if name not in ("restart", "two")
    }
    produced["restart"] = produce_known(kafka_bootstrap, topics["restart"], 100, partitions=2)

    def stream(name: str, receivers: int, wal: bool) -> dict[str, Any]:
        return {
            "name": name,
            "topic": topics[name],
            "group": f"g-{topics[name]}",
            "receivers": receivers,
            "wal": wal,
            "wal_dir": str(work / f"wal-{name}") if wal else None,
            "batch_interval": 1.0,
            "db": str(work / f"{name}.db"),
        }

    blocker = work / "a-file"
    blocker.write_text("not a directory")
    base = {
        "kafkaParams": {"bootstrap.servers": kafka_bootstrap, "group.id": "g-errors"},
        "batchInterval": 1.0,
    }
    spec = {
        "bootstrap": kafka_bootstrap,
        "cores": 7,
        "streams": [
            stream("one", 1, True),
            stream("two", 2, True),
            stream("nowal", 1, False),
            stream("restart", 1, True),
        ],
        "start_errors": [
            {
                "name": "cores",
                "kwargs": {
                    **base,
                    "topics": [topics["one"]],
                    "numReceivers": 7,
                    "walDir": str(work / "wal-cores"),
                },
            },
            {
                "name": "unwritable",
                "kwargs": {**base, "topics": [topics["one"]], "walDir": str(blocker / "wal")},
            },
            {
                "name": "missing-topic",
                "kwargs": {**base, "topics": ["no-such-topic-x"], "walDir": str(work / "wal-x")},
            },
        ],
    }
    app = App(work, "app", spec).start()
    try:
        app.wait(
            lambda: (
                [bool(r["assignment"]) for r in (app.status("two") or {}).get("receivers", [])]
                == [True, True]
            ),
            "both receivers of the two-receiver stream to hold partitions",
            timeout_s=180,
        )
        produced["two"] = produce_known(kafka_bootstrap, topics["two"], 250, partitions=4)
        for name in ("one", "two", "nowal", "restart"):
            app.wait_rows(work / f"{name}.db", len(produced[name]), timeout_s=120)
        # Kill the restart stream's receiver (its Python worker), then send more: the driver
        # must restart it, and the new one must read from the group's offsets.
        before = app.status("restart")
        assert before is not None
        pid = before["receivers"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        app.wait(
            lambda: (app.status("restart") or {}).get("restarts") == [1],
            "the killed receiver's restart",
        )
        produced["restart"] += produce_known(
            kafka_bootstrap, topics["restart"], 100, partitions=2, start_index=100
        )
        app.wait_rows(work / "restart.db", len(produced["restart"]), timeout_s=120)
        app.stop()
    except BaseException:
        app.kill()
        raise
    return {
        "app": app,
        "work": work,
        "topics": topics,
        "produced": produced,
        "killed_pid": pid,
        "status": {name: app.status(name) for name in topics},
        "errors": {
            e["name"]: e for e in json.loads((app.control / "start_errors.json").read_text())
        },
    }


@pytest.mark.parametrize("name", ["one", "two"])
def test_every_record_exactly_once_with_one_and_with_two_receivers(
    run: dict[str, Any], name: str
) -> None:
    db = run["work"] / f"{name}.db"
    assert sink_rows(db) == expected(run["produced"][name])
    assert deliveries(db) == 1000  # no record was delivered twice
    status = run["status"][name]
    assert status["final"] and status["error"] is None
    assert status["records"] == 1000  # the progress counts exactly the rows


def test_two_receivers_split_the_partitions_between_them(run: dict[str, Any]) -> None:
    receivers = run["status"]["two"]["receivers"]
    assert all(r["records"] > 0 for r in receivers)
    assert sum(r["records"] for r in receivers) == 1000


def test_receivers_commit_to_the_group(run: dict[str, Any], kafka_bootstrap: str) -> None:
    topic = run["topics"]["one"]
    offsets = fetch_group_offsets({"bootstrap.servers": kafka_bootstrap}, f"g-{topic}")
    assert offsets == {TopicPartition(topic, p): 250 for p in range(4)}


def test_batches_have_the_direct_streams_schema_empty_ones_too(run: dict[str, Any]) -> None:
    assert run["status"]["one"]["schemas"] == {"empty": SCHEMA, "rows": SCHEMA}


def test_without_the_wal_a_stream_that_stops_gracefully_loses_nothing(run: dict[str, Any]) -> None:
    db = run["work"] / "nowal.db"
    assert sink_rows(db) == expected(run["produced"]["nowal"])
    status = run["status"]["nowal"]
    assert status["error"] is None and status["wal_dir"]  # a scratch directory made at start
    assert deliveries(db) == 1000
    # Blocks were never in the log: the stream kept them in its run's volatile directory.
    assert os.listdir(os.path.join(status["wal_dir"], "blocks")) == []


def test_a_receiver_that_dies_is_restarted_with_its_reason_logged(run: dict[str, Any]) -> None:
    db = run["work"] / "restart.db"
    assert sink_rows(db) == expected(run["produced"]["restart"])  # nothing lost
    status = run["status"]["restart"]
    assert status["restarts"] == [1]
    [receiver] = status["receivers"]
    assert receiver["attempt"] == 1 and receiver["pid"] != run["killed_pid"]
    log = run["app"].log.read_text()
    assert "Receiver 0 died: its Python worker exited unexpectedly" in log
    assert "Restarting it in 2.0 s (restart 1)" in log


def test_too_few_cores_fail_at_start_naming_the_setting(run: dict[str, Any]) -> None:
    error = run["errors"]["cores"]
    assert error["type"] == "ConfigurationError"
    assert "'numReceivers': got 7" in error["message"]
    assert "spark.master=local[8] or more" in error["message"]


def test_an_unwritable_wal_dir_fails_at_start_with_the_path_and_the_reason(
    run: dict[str, Any],
) -> None:
    error = run["errors"]["unwritable"]
    assert error["type"] == "ConfigurationError"
    assert str(run["work"] / "a-file" / "wal") in error["message"]
    assert "NotADirectoryError" in error["message"]


def test_a_missing_topic_fails_at_start(run: dict[str, Any]) -> None:
    error = run["errors"]["missing-topic"]
    assert error["type"] == "TopicNotFoundError"
    assert "no-such-topic-x" in error["message"]
