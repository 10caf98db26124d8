"""Does this confluent-kafka's librdkafka still crash when a topic is deleted and recreated under
an assigned consumer? (README, "Known limits".)

    python scripts/check_recreated_topic_crash.py [--broker tansu|kafka]

``tansu`` (the default) is the embedded broker, ``kafka`` real Apache Kafka (KafkaCluster).

A plain confluent-kafka consumer, no kafka_direct code in the read: it reads a topic, the topic is
deleted and recreated, and the consumer keeps polling for 10 s in a child process. Exit status 0
if the child survived, 1 if it died (librdkafka 2.16: SIGSEGV, a NULL topic name in
``rd_kafka_metadata_update_op`` when Tansu's Fetch answer for the old topic id carries KIP-951
leader tags). Run it after upgrading confluent-kafka to see whether the limit still holds.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import textwrap

from confluent_kafka import Producer

from kafka_direct.testing.broker import EmbeddedBroker, create_topic, delete_topic
from kafka_direct.testing.kafka_cluster import KafkaCluster

CHILD = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "crash-check",
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(sys.argv[2], 0, 0)])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        c.poll(0.2)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent recreates the topic now
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    """
)


def main() -> int:
    import confluent_kafka

    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu")
    which = parser.parse_args().broker
    topic = "recreated"
    broker: contextlib.AbstractContextManager = (
        KafkaCluster() if which == "kafka" else EmbeddedBroker()
    )
    with broker as running:
        bootstrap = running.bootstrap_servers
        create_topic(bootstrap, topic, partitions=1)
        producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
        for i in range(10):
            producer.produce(topic, value=b"old-%d" % i)
        producer.flush(10)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, bootstrap, topic],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdout.readline()
        delete_topic(bootstrap, topic)
        create_topic(bootstrap, topic, partitions=1)
        producer.produce(topic, value=b"new-0")
        producer.flush(10)
        child.stdin.write("go\n")
        child.stdin.flush()
        code = child.wait(timeout=60)
        producer.flush(10)
        del producer  # before the broker stops: no disconnect lines
    version = (
        f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"
        f", broker {which}"
    )
    if code == 0:
        sys.stdout.write(f"{version}: the consumer survived the recreated topic\n")
        return 0
    cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    sys.stdout.write(f"{version}: the consumer's process died ({cause})\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
