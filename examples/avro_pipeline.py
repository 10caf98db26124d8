"""Avro topic → Spark → Avro topic, with a Schema Registry, and no JVM jar.

    python examples/avro_pipeline.py [--bootstrap-servers HOST:9092] [--registry URL]
                                     [--source orders] [--target order-totals]

Records in the Confluent wire format (what Confluent's serializers write: a magic byte, the
schema id, Avro) are read with ``kafka_direct.functions.from_avro``. Each record is decoded with
its own writer schema and resolved to the subject's latest one, so a topic written with several
versions of a schema reads as one table. The result is written back as Avro with ``to_avro``,
which registers the output schema under ``<target>-value``; any Confluent deserializer (Python's,
Java's) reads it.

Without --bootstrap-servers and --registry it starts an embedded broker and a test registry
(Apicurio, needs Java 21+), writes sample orders with confluent-kafka's AvroSerializer in two
schema versions, runs the pipeline, and prints what confluent-kafka's AvroDeserializer reads
back from the target topic.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from pyspark.sql import functions as F

from kafka_direct.functions import from_avro, to_avro
from kafka_direct.testing.broker import create_topic
from kafka_direct.testing.demo import bootstrap_or_embedded
from kafka_direct.testing.local import local_spark

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "quantity", "type": "int"},
                        {
                            "name": "price",
                            "type": {
                                "type": "bytes",
                                "logicalType": "decimal",
                                "precision": 10,
                                "scale": 2,
                            },
                        },
                    ],
                },
            },
        },
    ],
}
#: Version 2 adds a field with a default: orders written with version 1 read as "EUR".
ORDER_V2: dict[str, Any] = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}],
}
TOTAL: dict[str, Any] = {
    "type": "record",
    "name": "OrderTotal",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "items", "type": "int"},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "currency", "type": "string"},
    ],
}


def order_totals(records: Any, registry: str, source: str, target: str) -> Any:
    """The transformation: Kafka records of ``source`` in, the sink's ``key``/``value`` out."""
    orders = records.select(
        from_avro("value", subject=f"{source}-value", schemaRegistryAddress=registry).alias("o")
    )
    totals = orders.select(
        F.col("o.id").alias("id"),
        F.col("o.customer").alias("customer"),
        F.aggregate("o.lines", F.lit(0), lambda acc, line: acc + line.quantity).alias("items"),
        F.aggregate(
            "o.lines",
            F.lit(0).cast("decimal(12,2)"),
            lambda acc, line: (acc + line.price * line.quantity).cast("decimal(12,2)"),
        ).alias("total"),
        F.col("o.currency").alias("currency"),
    )
    return totals.select(
        F.col("customer").cast("binary").alias("key"),
        to_avro(
            F.struct("id", "customer", "items", "total", "currency"),
            json.dumps(TOTAL),
            subject=f"{target}-value",
            schemaRegistryAddress=registry,
        ).alias("value"),
    )


def run_pipeline(spark: Any, bootstrap: str, registry: str, source: str, target: str) -> None:
    """Read all of ``source`` once, write the totals to ``target`` (a batch job)."""
    records = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
    )
    (
        order_totals(records, registry, source, target)
        .write.format("kafka_direct")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .mode("append")
        .save()
    )


def sample_orders() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(schema, order) pairs: three orders written with version 1, two with version 2."""
    from decimal import Decimal

    def lines(n: int) -> list[dict[str, Any]]:
        return [
            {"sku": f"sku-{j}", "quantity": j + 1, "price": Decimal("2.50") * (j + 1)}
            for j in range(n)
        ]

    orders: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (ORDER_V1, {"id": i, "customer": f"c{i % 2}", "lines": lines(i)}) for i in range(1, 4)
    ]
    orders += [
        (ORDER_V2, {"id": i, "customer": f"c{i % 2}", "lines": lines(i), "currency": "USD"})
        for i in range(4, 6)
    ]
    return orders


def produce_orders(bootstrap: str, registry: str, topic: str) -> int:
    """Write :func:`sample_orders` with confluent-kafka's own AvroSerializer."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry, "timeout": 20})
    producer = Producer({"bootstrap.servers": bootstrap})
    context = SerializationContext(topic, MessageField.VALUE)
    orders = sample_orders()
    for schema, order in orders:
        value = AvroSerializer(client, json.dumps(schema))(order, context)
        producer.produce(topic, key=order["customer"].encode(), value=value)
        producer.flush(10)  # one batch per record: the embedded broker's log end stays exact
    return len(orders)


def read_totals(bootstrap: str, registry: str, topic: str, expected: int) -> list[Any]:
    """The target topic's records, decoded by confluent-kafka's own AvroDeserializer."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry, "timeout": 20}))
    context = SerializationContext(topic, MessageField.VALUE)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "avro-pipeline-example"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    totals: list[Any] = []
    for _ in range(30):
        for message in consumer.consume(100, 1.0):
            if message.error() is None:
                totals.append(deserializer(message.value(), context))
        if len(totals) >= expected:
            break
    consumer.close()
    return sorted(totals, key=lambda t: t["id"])


@contextlib.contextmanager
def registry_or_test(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from kafka_direct.testing import SchemaRegistry

    with SchemaRegistry() as registry:
        yield registry.url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", help="a real cluster (default: embedded broker)")
    parser.add_argument("--registry", help="a Schema Registry URL (default: a test registry)")
    parser.add_argument("--source", default="orders")
    parser.add_argument("--target", default="order-totals")
    args = parser.parse_args(argv)
    with (
        bootstrap_or_embedded(args.bootstrap_servers) as bootstrap,
        registry_or_test(args.registry) as registry,
    ):
        demo = not args.bootstrap_servers and not args.registry
        if demo:
            create_topic(bootstrap, args.source)
            create_topic(bootstrap, args.target)
            produce_orders(bootstrap, registry, args.source)
        spark = local_spark("AvroPipeline")
        run_pipeline(spark, bootstrap, registry, args.source, args.target)
        spark.stop()
        if demo:
            for total in read_totals(bootstrap, registry, args.target, len(sample_orders())):
                print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
