"""The main job, and its ``wordcount`` subcommand: Spark's ``DirectKafkaWordCount`` example as a
Structured Streaming query. Runs in the user's process (the Spark driver) and a producer thread
beside it.

A sample producer writes lines of words to a topic for a while; the query reads them with the
``kafka_direct`` source in 2-second micro-batches, counts the words of each batch (the example's
``reduceByKey`` per batch) and prints them. At the end the running totals are checked against
what the producer had delivered (a word counts once its record's delivery is confirmed), so the
demo also shows that nothing was lost or read twice.
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

from kafka_direct.cli.common import positive_number, positive_whole_number
from kafka_direct.cli.produce import Deliveries
from kafka_direct.errors import DeliveryError
from kafka_direct.testing.demo import DEMO_BROKERS
from kafka_direct.testing.samples import WORDS

__all__ = ["WordCountResult", "add_wordcount_subcommand", "run_wordcount"]


@dataclass
class WordCountResult:
    #: Words of the lines whose delivery was confirmed: what the query must count.
    produced: Counter[str] = field(default_factory=Counter)
    counted: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    #: Why the wait for the counts ended before they matched (None: they matched).
    gave_up: str | None = None

    @property
    def exact(self) -> bool:
        return self.gave_up is None and self.produced == self.counted


#: How long the producer waits for delivery reports before it names what is missing.
_FLUSH_S = 30.0


class _ProducerThread(threading.Thread):
    """Runs the sample producer beside the query; keeps what it raised, so the main thread
    re-raises it instead of waiting out its timeout for words that will never come."""

    def __init__(self, produce: Callable[[], None]) -> None:
        super().__init__(name="wordcount-producer", daemon=True)
        self._produce = produce
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, re-raised there
            self.error = exc
        finally:
            self.done.set()


def _produce(
    bootstrap: str,
    topic: str,
    seconds: float,
    rate: int,
    partitions: int,
    sent: Counter[str],
    lone_last_record: bool,
    *,
    producer_factory: Callable[[dict[str, Any]], Any] = Producer,
) -> None:
    """Produce lines of words for ``seconds``; a line's words go into ``sent`` when its delivery
    is confirmed, so the counts are checked against what Kafka has. Raises
    :class:`DeliveryError` naming what was not delivered."""
    from kafka_direct.kafka.translate import kafka_errors

    rng = random.Random(42)
    tally = Deliveries()

    def on_delivery(line: list[str]) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:  # called from poll/flush, in this thread
            tally(err, msg)
            if err is None:
                sent.update(line)

        return report

    def send(value: bytes, callback: Callable[[Any, Any], None], **where: Any) -> None:
        with kafka_errors(f"Producing to topic '{topic}'"):
            while True:
                try:
                    producer.produce(topic, value=value, on_delivery=callback, **where)
                    return
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain

    producer = producer_factory({"bootstrap.servers": bootstrap, "linger.ms": "20"})
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        for _ in range(max(1, rate // 10)):
            line = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
            send(" ".join(line).encode(), on_delivery(line), key=str(n).encode())
            n += 1
        producer.poll(0)
        time.sleep(0.1)
    _check_delivered(producer.flush(_FLUSH_S), n, topic, tally)
    if lone_last_record:
        # One final record per partition, alone in its batch: the embedded Tansu broker reports
        # the log end as the start of the last batch, which would hide its tail. Real Kafka
        # needs none of this.
        for p in range(partitions):
            send(b"", tally, partition=p)
            n += 1
            _check_delivered(producer.flush(_FLUSH_S), n, topic, tally)


def _check_delivered(remaining: int, sent: int, topic: str, tally: Deliveries) -> None:
    """Raise :class:`DeliveryError` if any record failed, or ``remaining`` (what ``flush``
    returned) still had no delivery report: their words would be missing from the counts."""
    if not remaining and not tally.failed:
        return
    problems = [tally.causes()] if tally.failed else []
    if remaining:
        problems.append(f"{remaining} had no delivery report within {_FLUSH_S:g} s")
    code = tally.failures.most_common(1)[0][0][0] if tally.failed else "_MSG_TIMED_OUT"
    raise DeliveryError(
        f"The word count's producer did not deliver {tally.failed + int(remaining)} of {sent} "
        f"records to topic '{topic}': {'; '.join(problems)}. The counts cannot be checked "
        "without them; check that the cluster is up and the topic writable.",
        topic=topic,
        partition=None,
        code=code,
    )


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
    embedded Tansu broker needs to report the true log end. What the producer thread raises
    (a record not delivered, say) is raised here; when the counts do not match in time,
    ``gave_up`` says how far they got.
    """
    from pyspark.sql import functions as F

    from kafka_direct.testing.broker import create_topic
    from kafka_direct.testing.local import local_spark

    topic = f"words-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=partitions)
    spark = local_spark("DirectKafkaWordCount")
    result = WordCountResult()
    producer = _ProducerThread(
        lambda: _produce(
            bootstrap, topic, seconds, rate, partitions, result.produced, lone_last_record
        )
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
    timeout_s = seconds + 120
    try:
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
                counted = _wait_until_counted(query, result, producer, timeout_s=timeout_s)
            finally:
                query.stop()
    finally:
        spark.stop()  # also when the producer or the query failed
    if not counted:  # read now: the query, which updates the counts, has stopped
        result.gave_up = _gave_up(result, producer.done.is_set(), timeout_s)
    return result


def _wait_until_counted(
    query: Any, result: WordCountResult, producer: _ProducerThread, timeout_s: float
) -> bool:
    """Wait until the producer is done and every delivered word is counted (True), or
    ``timeout_s`` passed (False); raise what the query or the producer raised."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        error = query.exception()
        if error is not None:
            raise error
        if producer.error is not None:
            raise producer.error
        if producer.done.is_set() and result.counted == result.produced:
            return True
        time.sleep(0.5)
    return False


def _gave_up(result: WordCountResult, producer_done: bool, timeout_s: float) -> str:
    """What a wait that timed out had reached, for the MISMATCH line."""
    counted, produced = sum(result.counted.values()), sum(result.produced.values())
    return (
        f"gave up waiting after {timeout_s:g} s: {counted} of the {produced} words delivered "
        f"were counted, in {result.batches} micro-batches"
        + ("" if producer_done else ", and the producer had not finished")
    )


def _wordcount(args: argparse.Namespace) -> int:
    from kafka_direct.testing.demo import bootstrap_or_embedded, describe

    if not args.bootstrap_servers:
        sys.stdout.write(f"Starting {describe(args.broker)}...\n")
        sys.stdout.flush()
    try:
        with bootstrap_or_embedded(args.bootstrap_servers, args.broker) as bootstrap:
            result = run_wordcount(
                bootstrap,
                seconds=args.seconds,
                rate=args.rate,
                partitions=args.partitions,
                lone_last_record=not args.bootstrap_servers and args.broker == "tansu",
            )
    except DeliveryError as exc:
        # Records not delivered exit 1, as in `produce`: the counts could not be checked.
        sys.stderr.write(f"kafka-direct: {exc}\n")
        return 1
    total = sum(result.produced.values())
    if result.exact:
        sys.stdout.write(
            f"Done: {result.batches} micro-batches, {total} words produced and counted; "
            "every word's count matches exactly.\n"
        )
        return 0
    missing = result.produced - result.counted
    extra = result.counted - result.produced
    why = f"; {result.gave_up}" if result.gave_up else ""
    sys.stdout.write(f"MISMATCH: missing {dict(missing)}, extra {dict(extra)}{why}\n")
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
    wc.add_argument(
        "--seconds", type=positive_number, default=20.0, help="how long to produce (20)"
    )
    wc.add_argument(
        "--rate", type=positive_whole_number, default=200, help="lines per second to produce (200)"
    )
    wc.add_argument(
        "--partitions", type=positive_whole_number, default=2, help="partitions of the topic (2)"
    )
    wc.set_defaults(func=_wordcount)
