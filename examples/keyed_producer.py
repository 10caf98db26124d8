"""Spark's keyed producer example: events `item{j}` → `action{i}`; a key stays in one partition.

    python examples/keyed_producer.py [--bootstrap-servers HOST:9092] [--topic T] [--events N]

It produces keyed events, prints where each one landed (partition and offset, as the example's
callback does), and then shows that every key went to exactly one partition. Kafka orders
records only within a partition, so that is what keeps each item's events in order.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from confluent_kafka import Producer

from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded


def produce_keyed(bootstrap: str, topic: str, events: int, items: int = 5) -> dict[str, set[int]]:
    """Produce `events` keyed events; return the partitions each key landed in."""
    producer = Producer({"bootstrap.servers": bootstrap})
    placements: dict[str, set[int]] = defaultdict(set)

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            raise RuntimeError(f"delivery failed: {err}")
        key = msg.key().decode()  # type: ignore[attr-defined]
        placements[key].add(msg.partition())  # type: ignore[attr-defined]
        print(
            f"{key} -> {msg.value().decode()}: partition {msg.partition()}, "  # type: ignore[attr-defined]
            f"offset {msg.offset()}"
        )  # type: ignore[attr-defined]

    for i in range(events):
        producer.produce(topic, key=f"item{i % items}", value=f"action{i}", on_delivery=delivered)
        producer.poll(0)
    producer.flush(30)
    return dict(placements)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--topic", default="item-actions")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--events", type=int, default=30)
    args = parser.parse_args(argv)
    with bootstrap_or_embedded(args.bootstrap_servers) as bootstrap:
        if not args.bootstrap_servers:
            create_topic(bootstrap, args.topic, partitions=args.partitions)
        placements = produce_keyed(bootstrap, args.topic, args.events)
    for key in sorted(placements):
        print(f"{key}: partitions {sorted(placements[key])}")
    one_each = all(len(parts) == 1 for parts in placements.values())
    print("every key stayed in one partition" if one_each else "a key was split across partitions!")
    return 0 if one_each else 1


if __name__ == "__main__":
    sys.exit(main())
