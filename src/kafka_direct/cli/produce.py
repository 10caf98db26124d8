"""The ``produce`` subcommand: sample data for a topic. Runs in the user's process.

``produce`` writes sample data (words, random bytes, or the keyed producer example's events) with
a progress bar of *delivered* records. Every record's delivery report is checked: the command
exits 1 and names the causes when any record was not delivered, and it gives up on a cluster it
cannot reach after ``--timeout`` seconds instead of waiting forever.

Where records go. The CLI places every record itself when it knows the topic's partition
count (from metadata):

- keyless records (``words``, ``bytes``) go round-robin: record *i* to partition *i mod N*;
- keyed records go where Java's producer and librdkafka's ``murmur2_random`` put them
  (``murmur2(key) & 0x7fffffff mod N``), so a key always lands in one partition.

When the partition count is unknown (metadata reports an error for the topic), librdkafka's
``murmur2_random`` partitioner places the records; the delivery reports then say what went
wrong. The number of records is exactly ``--records``, in ordinary batches.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TextIO

from kafka_direct.cli.common import (
    EXIT_INTERRUPTED,
    add_command_config,
    client_config,
    non_negative_number,
    positive_seconds,
    whole_number,
)
from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.producer.partitioning import murmur2_partition
from kafka_direct.testing.samples import WORDS

__all__ = ["Deliveries", "add_produce_subcommand", "place"]

log = logging.getLogger(__name__)

#: How often delivery reports are served while sending, in seconds (they feed the progress bar).
_PROGRESS_EVERY_S = 0.1

#: Extra time for the final flush beyond message.timeout.ms: librdkafka fails a record that waited
#: that long, so the flush ends by itself; the margin covers the last in-flight request.
_FLUSH_MARGIN_S = 5.0

#: Metadata requests for a topic that reports a retriable error, and the pause between them.
_METADATA_ATTEMPTS = 3

_METADATA_PAUSE_S = 0.5

_TRANSIENT_METADATA_ERRORS = {
    "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_FOR_PARTITION",
    "REQUEST_TIMED_OUT",
}

#: After Ctrl-C, how long produce waits for records already sent before it reports.
_INTERRUPT_FLUSH_S = 2.0

Record = tuple[bytes | None, bytes]  # (key, value)


def _payloads(kind: str, size: int, rng: random.Random) -> Callable[[int], Record]:
    if kind == "words":
        return lambda i: (
            None,
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))).encode(),
        )
    if kind == "keyed":
        # The keyed producer example: keys item0..item9; a key always lands in one partition.
        return lambda i: (f"item{i % 10}".encode(), f"action{i}".encode())
    return lambda i: (None, rng.randbytes(size))


def place(index: int, key: bytes | None, partitions: int | None) -> int:
    """The partition for record ``index``; -1 (librdkafka's partitioner) when unknown."""
    if not partitions:
        return -1
    if key is not None:
        return murmur2_partition(key, partitions)
    return index % partitions


class Deliveries:
    """The ``on_delivery`` callback of every record: what was delivered where, and why not.

    librdkafka calls it from ``poll``/``flush``, in the thread that calls them: no lock needed.
    """

    def __init__(self) -> None:
        self.delivered = 0
        self.per_partition: Counter[int] = Counter()
        #: (error name, error text) -> records that failed with it.
        self.failures: Counter[tuple[str, str]] = Counter()

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            self.per_partition[int(msg.partition())] += 1
        else:
            self.fail(err)

    def fail(self, err: Any) -> None:
        """Count one record that failed with ``err`` (a ``KafkaError``)."""
        self.failures[(str(err.name()), str(err.str()))] += 1

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def causes(self) -> str:
        """The distinct causes, most frequent first: ``text (NAME): n records``."""
        return "; ".join(
            f"{text} ({name}): {n} record{'s' if n != 1 else ''}"
            for (name, text), n in self.failures.most_common()
        )


def _producer_config(
    settings: Mapping[str, str], args: argparse.Namespace, events: Any
) -> dict[str, Any]:
    return {
        **settings,
        "linger.ms": "20",
        "batch.num.messages": "10000",
        # Records the CLI does not place itself (partition count unknown) go where Java's
        # producer would put them (librdkafka's default does not).
        "partitioner": "murmur2_random",
        # Java's default since Kafka 3.0: a retry never duplicates or reorders records.
        "enable.idempotence": "true",
        # A record that cannot be delivered in time fails with its cause instead of waiting
        # forever (librdkafka's default is 5 minutes).
        "message.timeout.ms": str(max(1, int(args.timeout * 1000))),
        # With the settings: the file's secrets are scrubbed from librdkafka's lines.
        **client_hooks(events, settings),
    }


def _partition_count(
    producer: Any, settings: Mapping[str, str], args: argparse.Namespace, events: Any
) -> tuple[int | None, str | None]:
    """The topic's partition count, creating the topic first if ``--partitions`` asks.

    Returns ``(count, None)``, or ``(None, what metadata said)`` when it reports an error for the
    topic. Raises :class:`KafkaClientError` when the cluster cannot be reached in time.
    """
    from confluent_kafka import KafkaException

    from kafka_direct.kafka.translate import translate
    from kafka_direct.testing.broker import create_topic

    topic, bootstrap = args.topic, args.bootstrap_servers

    def metadata(name: str | None) -> Any:
        try:
            return producer.list_topics(name, timeout=args.timeout)
        except KafkaException as exc:
            producer.poll(0)  # hand the client's error events to error_cb: they say why
            failed = translate(exc, "Fetching metadata")
            raise KafkaClientError(
                f"Could not reach the Kafka cluster at '{bootstrap}' within {args.timeout:g} s "
                f"to produce to topic '{topic}': {events.summary() or failed}. Check "
                "--bootstrap-servers, or raise --timeout.",
                code=failed.code,
            ) from exc

    # All topics first: asking for one topic by name makes auto-creating clusters create it,
    # with their default partition count, before --partitions could.
    known = metadata(None).topics
    if args.partitions and topic not in known:
        # The admin client connects as the producer does: a secured cluster needs the
        # --command-config settings (SASL, TLS) for CreateTopics too.
        try:
            create_topic(
                bootstrap, topic, partitions=args.partitions, timeout_s=args.timeout,
                settings={**settings, **client_hooks(events, settings)},
            )  # fmt: skip
        except KafkaClientError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":  # created meanwhile by someone else
                raise
        except (TimeoutError, FutureTimeout) as exc:
            raise KafkaClientError(
                f"Could not create topic '{topic}' with {args.partitions} partitions on "
                f"'{bootstrap}' within {args.timeout:g} s. Raise --timeout, or create it first.",
                code="_TIMED_OUT",
            ) from exc
    meta = known.get(topic)
    # A topic that was just created (by us, or by a cluster that creates topics on request) can
    # report a retriable error such as LEADER_NOT_AVAILABLE for a moment: ask again briefly.
    for attempt in range(_METADATA_ATTEMPTS):
        if meta is not None and (meta.error is None or not _transient(meta.error)):
            break
        if attempt:
            time.sleep(_METADATA_PAUSE_S)
        meta = metadata(topic).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        said = "no such topic" if meta is None or meta.error is None else _error_text(meta.error)
        log.info("Metadata for topic '%s': %s; librdkafka will place the records", topic, said)
        return None, f"metadata for the topic says: {said}"
    count = len(meta.partitions)
    if args.partitions and count != args.partitions:
        log.warning(
            "Topic '%s' already exists with %d partitions; --partitions %d was not applied",
            topic,
            count,
            args.partitions,
        )
    return count, None


def _transient(error: Any) -> bool:
    # confluent-kafka does not set retriable() on metadata errors: go by the code too.
    return bool(error.retriable()) or error.name() in _TRANSIENT_METADATA_ERRORS


def _error_text(error: Any) -> str:
    """A ``KafkaError`` as ``text (NAME)``, the way the library's messages show it."""
    return f"{error.str()} ({error.name()})"


class _Run:
    """One ``produce`` run: sends records, keeps the progress bar up to date, drains.

    The bar is tqdm's, drawn only when stderr is a terminal: redraws (``\\r``) in a pipe or a
    log file are noise, and the final line says what was delivered anyway.
    """

    def __init__(
        self, producer: Any, args: argparse.Namespace, err: TextIO, began: float | None = None
    ) -> None:
        from tqdm import tqdm

        self.producer = producer
        self.args = args
        self.err = err
        self.tally = Deliveries()
        #: When the command started (before the client was created): what the user waited for.
        self.began = time.monotonic() if began is None else began
        self._polled = 0.0
        self.bar = tqdm(
            total=args.records,
            file=err,
            disable=not err.isatty(),
            unit=" records",
            desc="delivered",
            mininterval=_PROGRESS_EVERY_S,
            dynamic_ncols=True,
            leave=True,
        )

    def send(self, partition: int, record: Record) -> None:
        from confluent_kafka import KafkaException

        key, value = record
        while True:
            try:
                self.producer.produce(
                    self.args.topic,
                    value=value,
                    key=key,
                    partition=partition,
                    on_delivery=self.tally,
                )
                return
            except BufferError:
                self.producer.poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as exc:
                # Refused before it was queued (too large, unknown partition...): a failed record.
                self.tally.fail(exc.args[0])
                return

    def drain(self) -> int:
        """Flush until every sent record has its delivery report; the number still without."""
        deadline = time.monotonic() + self.args.timeout + _FLUSH_MARGIN_S
        remaining = len(self.producer)
        while remaining and time.monotonic() < deadline:
            remaining = self.producer.flush(_PROGRESS_EVERY_S)
            self.progress()
        self.progress(force=True)
        return int(remaining)

    def progress(self, force: bool = False) -> None:
        """Move the bar to the delivered count (tqdm limits the redraws)."""
        done = self.tally.delivered
        if self.tally.failed:
            self.bar.set_postfix_str(f"{self.tally.failed} failed", refresh=False)
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)
        if force:
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def produce_all(self, partitions: int | None) -> int:
        """Send ``--records`` records; the number still without a delivery report at the end."""
        args = self.args
        make = _payloads(args.kind, args.size, random.Random(args.seed))
        for i in range(args.records):
            key, value = make(i)
            self.send(place(i, key, partitions), (key, value))
            if args.rate:
                ahead = (i + 1) / args.rate - (time.monotonic() - self.began)
                if ahead > 0:
                    time.sleep(ahead)
            now = time.monotonic()
            if now - self._polled >= _PROGRESS_EVERY_S:
                self._polled = now
                self.producer.poll(0)  # serve delivery reports, so the bar counts them
                self.progress()
        return self.drain()


def _produce(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    producer_factory: Callable[[dict[str, Any]], Any] | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    from confluent_kafka import Producer

    from kafka_direct.kafka.events import ClientEvents
    from kafka_direct.kafka.translate import kafka_errors

    began = time.monotonic()
    events = ClientEvents("The Kafka producer")
    # --command-config read and judged once, for the producer and the admin client.
    settings = client_config(args)
    with kafka_errors("Creating the Kafka producer"):
        producer = (producer_factory or Producer)(_producer_config(settings, args, events))
    partitions, topic_problem = _partition_count(producer, settings, args, events)
    run = _Run(producer, args, err, began)
    try:
        remaining = run.produce_all(partitions)
    except KeyboardInterrupt:
        # Records already sent may still be delivered: wait a moment, so the count is honest.
        # A second Ctrl-C ends this wait too (cli.main reports it).
        remaining = producer.flush(_INTERRUPT_FLUSH_S)
        run.progress(force=True)
        run.close()
        err.write(
            f"kafka-direct: interrupted; {run.tally.delivered} of {args.records} records "
            f"were delivered to topic '{args.topic}'"
            + (f", {remaining} still unconfirmed" if remaining else "")
            + "\n"
        )
        return EXIT_INTERRUPTED
    run.close()
    return _summary(args, run, remaining, topic_problem, out, err)


def _summary(
    args: argparse.Namespace,
    run: _Run,
    remaining: int,
    topic_problem: str | None,
    out: TextIO,
    err: TextIO,
) -> int:
    tally = run.tally
    missing = args.records - tally.delivered
    if missing:
        problems = [tally.causes()] if tally.failed else []
        if remaining:
            problems.append(
                f"{remaining} record{'s' if remaining != 1 else ''} had no delivery report "
                f"within {args.timeout + _FLUSH_MARGIN_S:g} s"
            )
        if topic_problem:
            problems.append(topic_problem)
        err.write(
            f"kafka-direct: {missing} of {args.records} records were not delivered to topic "
            f"'{args.topic}': {'; '.join(problems)}\n"
        )
        return 1
    spread = " ".join(f"{p}={n}" for p, n in sorted(tally.per_partition.items()))
    out.write(
        f"Delivered {tally.delivered} records to topic '{args.topic}' in "
        f"{time.monotonic() - run.began:.2f} s"
        + (f" (per partition: {spread})" if spread else "")
        + "\n"
    )
    return 0


_PRODUCE_DESCRIPTION = """\
Produce sample records to a topic, with a progress bar of delivered records.

Every delivery report is checked: the command exits 1 and names the causes when any record was
not delivered. Keyless records go round-robin over the partitions, keyed ones where Java's
producer puts them (murmur2); when the topic's partition count is unknown, librdkafka places
them. Records go out in ordinary batches, and the record count is always exactly --records.
"""


def add_produce_subcommand(sub: Any) -> None:
    prod = sub.add_parser(
        "produce",
        description=_PRODUCE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prod.add_argument("--bootstrap-servers", required=True)
    add_command_config(prod)
    prod.add_argument("--topic", required=True)
    prod.add_argument(
        "--records", type=whole_number, default=10_000, help="how many records (10000)"
    )
    prod.add_argument("--kind", choices=("words", "bytes", "keyed"), default="words")
    prod.add_argument("--size", type=whole_number, default=100, help="value size for --kind bytes")
    prod.add_argument(
        "--partitions", type=whole_number, default=0, help="create the topic with N partitions"
    )
    prod.add_argument(
        "--rate",
        type=non_negative_number,
        default=0,
        help="records per second (0: as fast as possible)",
    )
    prod.add_argument("--seed", type=int, default=42, help="seed of the sample data (42)")
    prod.add_argument(
        "--timeout",
        type=positive_seconds,
        default=30.0,
        help="seconds to reach the cluster, and for each record to be delivered (30)",
    )
    prod.set_defaults(func=_produce)
