"""The ``produce`` and ``lag`` subcommands of the command line. Runs in the user's process.

``lag`` prints the ``kafka-consumer-groups --describe`` view of seed 003 (CURRENT-OFFSET,
LOG-END-OFFSET, LAG per partition), once or every ``--watch`` seconds. ``produce`` writes sample
data (words, random bytes, or seed 003's keyed item/action events) with a progress bar.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from kafka_direct.group_offsets import LagRow, group_lag
from kafka_direct.wordcount import WORDS

__all__ = ["add_subcommands", "format_lag"]


def format_lag(group: str, rows: Sequence[LagRow]) -> str:
    """A fixed-width table like ``kafka-consumer-groups --describe``."""
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
    lines = [header] + [
        (
            group,
            r.topic,
            str(r.partition),
            "-" if r.current_offset is None else str(r.current_offset),
            str(r.log_end_offset),
            "-" if r.lag is None else str(r.lag),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    total = sum(r.lag or 0 for r in rows)
    out.append(f"total lag: {total}" if rows else f"group '{group}' has no committed offsets")
    return "\n".join(out) + "\n"


def _lag(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    kafka = {"bootstrap.servers": args.bootstrap_servers}
    rounds = 0
    while True:
        rows = group_lag(kafka, args.group, args.topic or None, timeout_s=args.timeout)
        out.write(format_lag(args.group, rows))
        out.flush()
        rounds += 1
        if not args.watch or (args.count and rounds >= args.count):
            return 0
        time.sleep(args.watch)
        out.write("\n")


def _payloads(
    kind: str, size: int, rng: random.Random
) -> Callable[[int], tuple[bytes | None, bytes]]:
    if kind == "words":
        return lambda i: (
            None,
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))).encode(),
        )
    if kind == "keyed":
        # Seed 003's producer: keys item0..item9 with actions; a key always lands in one partition.
        return lambda i: (f"item{i % 10}".encode(), f"action{i}".encode())
    return lambda i: (None, rng.randbytes(size))


def _produce(args: argparse.Namespace, err: TextIO | None = None) -> int:
    err = err or sys.stderr
    from confluent_kafka import Producer

    from kafka_direct.broker import create_topic
    from kafka_direct.errors import KafkaClientError

    if args.partitions:
        try:
            create_topic(args.bootstrap_servers, args.topic, partitions=args.partitions)
        except KafkaClientError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
    producer: Any = Producer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "linger.ms": "20",
            "batch.num.messages": "10000",
        }
    )
    make = _payloads(args.kind, args.size, random.Random(args.seed))
    began = time.monotonic()
    for i in range(args.records):
        key, value = make(i)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
        if args.rate:
            ahead = (i + 1) / args.rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
        if i % 5000 == 0 or i + 1 == args.records:
            producer.poll(0)
            _progress(err, i + 1, args.records, began)
    remaining = producer.flush(60)
    err.write("\n")
    if remaining:
        err.write(f"kafka-direct: {remaining} records were not delivered\n")
        return 1
    return 0


def _progress(err: TextIO, done: int, total: int, began: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - began, 1e-6)
    bar = "#" * filled + "-" * (width - filled)
    err.write(f"\r[{bar}] {done}/{total} records ({rate:,.0f}/s)")
    err.flush()


def add_subcommands(sub: Any) -> None:
    lag = sub.add_parser(
        "lag", help="consumer-group lag per partition (kafka-consumer-groups view)"
    )
    lag.add_argument("--bootstrap-servers", required=True)
    lag.add_argument("--group", required=True)
    lag.add_argument("--topic", action="append", help="also show partitions without a commit")
    lag.add_argument("--watch", type=float, default=0, help="refresh every N seconds")
    lag.add_argument("--count", type=int, default=0, help="with --watch: stop after N tables")
    lag.add_argument("--timeout", type=float, default=15.0, help="seconds per broker request")
    lag.set_defaults(func=_lag)

    prod = sub.add_parser("produce", help="produce sample records, with a progress bar")
    prod.add_argument("--bootstrap-servers", required=True)
    prod.add_argument("--topic", required=True)
    prod.add_argument("--records", type=int, default=10_000)
    prod.add_argument("--kind", choices=("words", "bytes", "keyed"), default="words")
    prod.add_argument("--size", type=int, default=100, help="value size for --kind bytes")
    prod.add_argument(
        "--partitions", type=int, default=0, help="create the topic with N partitions"
    )
    prod.add_argument(
        "--rate", type=float, default=0, help="records per second (0: as fast as possible)"
    )
    prod.add_argument("--seed", type=int, default=42)
    prod.set_defaults(func=_produce)
