"""What a new Kafka client's first request costs, and what that adds to a small query:
``python benchmarks/first_contact.py``. Runs in its own process, with one Kafka broker (its
child) and one local Spark.

librdkafka learns the brokers from its bootstrap connection, drops that connection and connects
to a broker by its id; it spaces such connections by half of ``reconnect.backoff.ms`` (at least
11 ms). kafka_direct's clients set 20 ms where the user sets nothing (librdkafka's default is
100). Printed, with librdkafka's default and with kafka_direct's setting, alternating:

- a new admin client's first metadata answer (the driver's check and plan of each query);
- a new consumer's first record (an executor's consumer that the pool does not have yet);
- a new producer's first acknowledged record (a write task's new producer), also without
  idempotence: an idempotent producer first asks for a producer id, and librdkafka retries
  that on a fixed 500 ms timer when no broker connection is up yet;
- a new transactional producer's ``init_transactions``, one record and its commit (what every
  exactly-once write task does first, with its own new producer);
- a new marker reader's committed offset (what every exactly-once write task reads beside it:
  a consumer in the group named after its transactional id, never pooled);
- a small batch query end to end (``count`` of ``--records`` records in 4 partitions), for
  ``format("kafka_direct")`` both ways and, with ``kafka`` in ``--formats`` (the default),
  Spark's ``format("kafka")`` beside it, on the PySpark its connector was built for.

    python benchmarks/first_contact.py
    python benchmarks/first_contact.py --clients 50 --queries 20 --formats kafka_direct

Run it on a quiet machine: the load is printed first.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from kafka_direct_bench.common import loadavg
from kafka_direct_bench.oracle_python import add_formats_option, chosen_formats, versions

from kafka_direct.config.clients import (
    admin_config,
    connection_config,
    executor_consumer_config,
    marker_consumer_config,
    producer_config,
)
from kafka_direct.testing import KafkaCluster
from kafka_direct.testing.local import local_spark
from kafka_direct.testing.spark_connector import (
    connector_version,
    spark_kafka_conf,
    spark_kafka_jars,
)
from kafka_direct.testing.topics import create_topic

#: librdkafka's own default, set explicitly to measure kafka_direct without its setting.
LIBRDKAFKA_DEFAULT = {"reconnect.backoff.ms": "100"}


def _admin(config: dict[str, str]) -> None:
    AdminClient(config).list_topics(timeout=30)


def _consume_first(config: dict[str, str], topic: str) -> None:
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while True:
            message = consumer.poll(30)
            if message is None:
                raise SystemExit("no record within 30 s")
            if message.error() is None:
                return
    finally:
        consumer.close()


def _produce_first(config: dict[str, str], topic: str) -> None:
    producer = Producer(config)
    producer.produce(topic, b"x", partition=1)
    if producer.flush(30) != 0:
        raise SystemExit("a record was not acknowledged within 30 s")


def _transaction_first(config: dict[str, str], topic: str, metadata_first: bool = False) -> None:
    """What every exactly-once write task does first: a new transactional producer (the id the
    task's partition always has), ``init_transactions``, one record, the commit. The sink's
    tasks ask for a topic's metadata first (``metadata_first``, TransactionalProducer)."""
    producer = Producer({**config, "transactional.id": "first-contact-0"})
    if metadata_first:  # twice, as TransactionalProducer.init_transactions does
        producer.list_topics(topic, 30)
        producer.list_topics(topic, 30)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=1)
    producer.commit_transaction(30)


def _marker_first(config: dict[str, str], topic: str) -> None:
    """What every exactly-once write task reads beside its producer: a new consumer in the group
    named after the task's transactional id, and its committed offset on partition 0."""
    consumer = Consumer(marker_consumer_config(config, "first-contact-0"))
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], 30)
        if committed.error is not None:
            raise SystemExit(f"no committed offset: {committed.error}")
    finally:
        consumer.close()


def _ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _alternating(
    cases: dict[str, Callable[[], object]], rounds: int, warm: int = 1
) -> dict[str, list[float]]:
    for fn in cases.values():
        for _ in range(warm):
            fn()
    out: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            out[name].append(_ms(cases[name]))
    return out


def _report(title: str, results: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    for name, times in results.items():
        p90 = sorted(times)[int(len(times) * 0.9)]
        print(f"  {name:<44} median {statistics.median(times):7.1f} ms   p90 {p90:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=30, help="new clients per case")
    parser.add_argument("--queries", type=int, default=10, help="queries per case")
    parser.add_argument("--records", type=int, default=10_000)
    add_formats_option(parser)
    args = parser.parse_args()
    formats = chosen_formats(args.formats, __file__)
    print(f"load average {loadavg()}", flush=True)
    jars = spark_kafka_jars() if "kafka" in formats else []
    with KafkaCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        user = {"bootstrap.servers": bootstrap}
        topic = "first-contact"
        create_topic(bootstrap, topic, 4)
        seed = Producer(user)
        for i in range(args.records):
            seed.produce(topic, f"record-{i}".encode(), partition=i % 4)
        assert seed.flush(60) == 0
        consumer = executor_consumer_config(user, group_id="fc", isolation_level="read_committed")

        def clients(config: Callable[[dict[str, str]], dict[str, str]]) -> dict[str, Callable]:
            return {
                "admin": lambda: _admin(config(admin_config(user))),
                "consumer": lambda: _consume_first(config(consumer), topic),
                "producer": lambda: _produce_first(config(producer_config(user)), topic),
                "transactional": lambda: _transaction_first(
                    config(producer_config(user, exactly_once=True)), topic
                ),
                "marker": lambda: _marker_first(config(connection_config(user)), topic),
            }

        ours = clients(lambda c: c)
        theirs = clients(lambda c: {**c, **LIBRDKAFKA_DEFAULT})
        for kind, title in [
            ("admin", "a new admin client's first metadata answer"),
            ("consumer", "a new consumer's first record"),
            ("producer", "a new producer's first acknowledged record"),
            ("transactional", "a new transactional producer's init_transactions, first commit"),
            ("marker", "a new marker reader's committed offset"),
        ]:
            cases = {
                "librdkafka's default (reconnect.backoff.ms=100)": theirs[kind],
                "kafka_direct's (reconnect.backoff.ms=20)": ours[kind],
            }
            if kind == "transactional":
                cases["kafka_direct's, metadata first (the sink's tasks)"] = functools.partial(
                    _transaction_first, producer_config(user, exactly_once=True), topic, True
                )
            if kind == "producer":
                # What the idempotent producer's wait for its producer id costs (below).
                cases["kafka_direct's, enable.idempotence=false"] = functools.partial(
                    _produce_first, {**producer_config(user), "enable.idempotence": "false"}, topic
                )
            _report(title, _alternating(cases, args.clients))

        spark = local_spark("first-contact", conf=spark_kafka_conf(jars) if jars else {})
        ver = versions(spark, connector_version(jars) if jars else None)
        print("\nversions: " + ", ".join(f"{k} {v}" for k, v in ver.items()), flush=True)

        def count(fmt: str, **options: str) -> Callable[[], object]:
            def run() -> None:
                reader = spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                for key, value in {"subscribe": topic, **options}.items():
                    reader = reader.option(key, value)
                got = reader.load().count()
                # The producer case above wrote into partition 1: at least the seeded records.
                assert got >= args.records, got

            return run

        queries: dict[str, Callable[[], object]] = {}
        if "kafka_direct" in formats:
            queries["kafka_direct, librdkafka's default backoff"] = count(
                "kafka_direct", **{"kafka.reconnect.backoff.ms": "100"}
            )
            queries["kafka_direct"] = count("kafka_direct")
        if "kafka" in formats:
            queries["kafka (Spark's connector)"] = count("kafka")
        _report(
            f"a batch count of {args.records} records in 4 partitions, end to end",
            _alternating(queries, args.queries, warm=3),
        )
        spark.stop()


if __name__ == "__main__":
    main()
