"""The main job, and its ``wordcount`` subcommand: Spark's ``DirectKafkaWordCount`` example as a
Structured Streaming query. Runs in the user's process (the Spark driver) and a producer thread
beside it.

A sample producer writes lines of words to a topic for a while; the query reads them with the
``kafka_direct`` source in 2-second micro-batches, counts the words of each batch (the example's
``reduceByKey`` per batch) and prints them. At the end the running totals are checked against
what the producer sent, so the demo also shows that nothing was lost or read twice.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from kafka_direct.testing.demo import DEMO_BROKERS
from kafka_direct.testing.samples import WORDS

__all__ = ["WordCountResult", "add_wordcount_subcommand", "run_wordcount"]


@dataclass
class WordCountResult:
    produced: Counter[str] = field(default_factory=Counter)
    counted: Counter[str] = field(default_factory=Counter)
    batches: int = 0

    @property
    def exact(self) -> bool:
        return self.produced == self.counted


def _produce(
    bootstrap: str,
    topic: str,
    seconds: float,
    rate: int,
    partitions: int,
    sent: Counter[str],
    done: threading.Event,
    lone_last_record: bool,
) -> None:
    rng = random.Random(42)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "20"})
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        for _ in range(max(1, rate // 10)):
            line = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
            sent.update(line)
            producer.produce(topic, value=" ".join(line).encode(), key=str(n).encode())
            n += 1
        producer.poll(0)
        time.sleep(0.1)
    producer.flush(30)
    if lone_last_record:
        # One final record per partition, alone in its batch: the embedded Tansu broker reports
        # the log end as the start of the last batch, which would hide its tail. Real Kafka
        # needs none of this.
        for p in range(partitions):
            producer.produce(topic, value=b"", partition=p)
            producer.flush(30)
    done.set()


def run_wordcount(
    bootstrap: str,
    *,
    seconds: float = 20.0,
    rate: int = 200,
    partitions: int = 2,
    trigger: str = "2 seconds",
    out: Callable[[str], Any] = sys.stdout.write,
    lone_last_record: bool = False,
) -> WordCountResult:
    """Produce for ``seconds`` and count words per micro-batch until everything is counted.

    ``lone_last_record`` ends each partition with a record alone in its batch, which the
    embedded Tansu broker needs to report the true log end.
    """
    from pyspark.sql import functions as F

    from kafka_direct.testing.broker import create_topic
    from kafka_direct.testing.local import local_spark

    topic = f"words-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=partitions)
    spark = local_spark("DirectKafkaWordCount")
    result = WordCountResult()
    done = threading.Event()
    producer = threading.Thread(
        target=_produce,
        args=(bootstrap, topic, seconds, rate, partitions, result.produced, done, lone_last_record),
        daemon=True,
    )

    def per_batch(df: Any, batch_id: int) -> None:
        # DirectKafkaWordCount's words.map(x => (x, 1)).reduceByKey(_ + _), on this batch only.
        words = df.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
        rows = words.where(F.col("word") != "").groupBy("word").count().collect()
        counts = Counter({r["word"]: int(r["count"]) for r in rows})
        result.counted.update(counts)
        result.batches += 1
        top = ", ".join(f"{w}: {c}" for w, c in counts.most_common(6)) or "(no new words)"
        out(f"Batch {batch_id}: {sum(counts.values())} words | {top}\n")

    lines = (
        spark.readStream.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="wordcount-") as checkpoint:
        query = (
            lines.writeStream.foreachBatch(per_batch)
            .trigger(processingTime=trigger)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        out(f"Counting words on topic {topic} at {bootstrap} ({seconds:.0f} s of input)\n")
        producer.start()
        try:
            _wait_until_counted(query, result, done, timeout_s=seconds + 120)
        finally:
            query.stop()
    spark.stop()
    return result


def _wait_until_counted(
    query: Any, result: WordCountResult, done: threading.Event, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        error = query.exception()
        if error is not None:
            raise error
        if done.is_set() and result.counted == result.produced:
            return
        time.sleep(0.5)


def _wordcount(args: argparse.Namespace) -> int:
    from kafka_direct.testing.demo import bootstrap_or_embedded, describe

    if not args.bootstrap_servers:
        sys.stdout.write(f"Starting {describe(args.broker)}...\n")
        sys.stdout.flush()
    with bootstrap_or_embedded(args.bootstrap_servers, args.broker) as bootstrap:
        result = run_wordcount(
            bootstrap,
            seconds=args.seconds,
            rate=args.rate,
            partitions=args.partitions,
            lone_last_record=not args.bootstrap_servers and args.broker == "tansu",
        )
    total = sum(result.produced.values())
    if result.exact:
        sys.stdout.write(
            f"Done: {result.batches} micro-batches, {total} words produced and counted; "
            "every word's count matches exactly.\n"
        )
        return 0
    missing = result.produced - result.counted
    extra = result.counted - result.produced
    sys.stdout.write(f"MISMATCH: missing {dict(missing)}, extra {dict(extra)}\n")
    return 1


def add_wordcount_subcommand(sub: Any) -> None:
    wc = sub.add_parser(
        "wordcount",
        description="Run the streaming word count (the README's main job): produce lines of "
        "words, count them with the kafka_direct source, and check every count.",
    )
    wc.add_argument("--bootstrap-servers", help="use this cluster instead of the embedded broker")
    wc.add_argument(
        "--broker",
        choices=DEMO_BROKERS,
        default="kafka",
        help="the embedded broker to start: real Apache Kafka (default; its jars are fetched on "
        "the first run) or Tansu (instant start; its log end lags by a record batch)",
    )
    wc.add_argument("--seconds", type=float, default=20.0, help="how long to produce (20)")
    wc.add_argument("--rate", type=int, default=200, help="lines per second to produce (200)")
    wc.add_argument("--partitions", type=int, default=2, help="partitions of the topic (2)")
    wc.set_defaults(func=_wordcount)
