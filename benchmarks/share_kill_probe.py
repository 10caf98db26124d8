"""What a share group (KIP-932) does with the records of a member that is SIGKILLed while holding
them, with plain confluent-kafka ShareConsumers (no Spark, no kafka_direct receiver): when they
come back, and whether the other members' acknowledgements of them are accepted. Starts its own
Kafka 4.4.0 (kafka_direct.testing.KafkaCluster); prints one JSON event a line, times in seconds
from the start.

    python benchmarks/share_kill_probe.py            # A holds 200 records, is killed; B reads
    python benchmarks/share_kill_probe.py --join     # ... and a third member C joins 8 s later

Members run as processes of their own (``--member ROLE ...``): ``hold`` polls once and never
acknowledges; ``work`` accepts each record at once and commits every 0.25 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

LOCK_MS = 5000
RECORDS = 200


def member(role: str, bootstrap: str, group: str, topic: str, out: str, stop: str) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    t0 = float(os.environ["PROBE_T0"])
    events = open(out, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def event(kind: str, **fields: Any) -> None:
        line = {"t": round(time.time() - t0, 2), "pid": os.getpid(), "role": role, "ev": kind}
        events.write(json.dumps({**line, **fields}) + "\n")

    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "client.id": f"{role}-{os.getpid()}",
        }
    )

    def answered(offsets: Any, error: Any) -> None:
        for _tp, done in (offsets or {}).items():
            event("ack", ok=error is None, error=str(error) if error else None, n=len(done))

    consumer.set_acknowledgement_commit_callback(answered)
    consumer.subscribe([topic])
    event("start")
    committed = time.time()
    while not os.path.exists(stop):
        messages = [m for m in consumer.poll(0.2) if m.error() is None]
        if messages:
            counts: dict[int, int] = {}
            for m in messages:
                counts[m.delivery_count()] = counts.get(m.delivery_count(), 0) + 1
            event("poll", n=len(messages), delivery_counts=counts)
            if role == "hold":
                event("holding")
                while True:  # killed here
                    time.sleep(1)
            for m in messages:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        if time.time() - committed > 0.25:
            consumer.commit_sync(5.0)
            committed = time.time()
    consumer.close()


def main(join: bool) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafka_direct.kafka.share_groups import alter_share_group_config
    from kafka_direct.testing.kafka_cluster import KafkaCluster

    work = Path(tempfile.mkdtemp(prefix="share-kill-probe-"))
    out, stop = work / "events.jsonl", work / "stop"
    cluster = KafkaCluster(kafka_version="4.4.0", group_share_min_record_lock_duration_ms=1000)
    cluster.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = f"probe-{uuid.uuid4().hex[:6]}"
        group = f"g-{topic}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        alter_share_group_config(
            {"bootstrap.servers": bootstrap},
            group,
            {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS)},
        )
        env = dict(os.environ, PROBE_T0=str(time.time()))

        def start(role: str) -> subprocess.Popen[bytes]:
            args = [role, bootstrap, group, topic, str(out), str(stop)]
            proc = subprocess.Popen([sys.executable, __file__, "--member", *args], env=env)
            procs.append(proc)
            return proc

        def seen(kind: str) -> bool:
            lines = out.read_text().splitlines() if out.exists() else []
            return any(json.loads(line)["ev"] == kind for line in lines)

        def wait(kind: str) -> None:
            deadline = time.monotonic() + 120
            while not seen(kind):
                if time.monotonic() > deadline:
                    raise SystemExit(f"no '{kind}' event within 120 s")
                time.sleep(0.2)

        holder = start("hold")
        wait("start")
        time.sleep(3)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "50"})
        for i in range(RECORDS):
            producer.produce(topic, value=f"v{i}".encode())
        producer.flush(30)
        wait("holding")
        start("work")
        time.sleep(5)
        os.kill(holder.pid, signal.SIGKILL)
        print(json.dumps({"t": round(time.time() - float(env["PROBE_T0"]), 2), "ev": "killed A"}))
        if join:
            time.sleep(8)
            start("work")
        time.sleep(75)  # past the killed member's session timeout (45 s)
        stop.write_text("stop")
        for proc in procs[1:]:
            proc.wait(60)
        print(out.read_text(), end="")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        cluster.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        member(*sys.argv[2:8])
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--join", action="store_true", help="a third member joins 8 s later")
        main(parser.parse_args().join)
