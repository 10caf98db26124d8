"""Fixtures for the Schema Registry tests: one real registry (Apicurio Registry 3, in-memory) for
the session, and confluent-kafka's own serializers as the reference. If the registry cannot
start, every test here errors: nothing is skipped."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_direct.testing.schema_registry import SchemaRegistry

_names = itertools.count()


@pytest.fixture(scope="session")
def registry_url() -> Iterator[str]:
    external = os.environ.get("KAFKA_DIRECT_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    registry = SchemaRegistry()
    try:
        registry.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start must fail the run loudly
        pytest.fail(f"The test Schema Registry could not start: {exc}", pytrace=False)
    yield registry.url
    registry.stop()


@pytest.fixture()
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test, so each test has subjects of its own."""
    return f"sr-{request.node.name[:40]}-{os.getpid()}-{next(_names)}".replace("[", "-").replace(
        "]", ""
    )


@pytest.fixture()
def confluent(registry_url: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    # A timeout, so that a response lost on a kept-alive connection is retried (the client retries
    # transport errors) instead of waiting forever: seen once with Apicurio in a full run.
    return SchemaRegistryClient({"url": registry_url, "timeout": 20})


@pytest.fixture()
def serialize(confluent: Any) -> Callable[[str, dict[str, Any], list[Any]], list[bytes]]:
    """``serialize(topic, schema, records)``: confluent-kafka's AvroSerializer, topic strategy."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    def run(topic: str, schema: dict[str, Any], records: list[Any]) -> list[bytes]:
        serializer = AvroSerializer(confluent, json.dumps(schema))
        context = SerializationContext(topic, MessageField.VALUE)
        return [serializer(record, context) for record in records]

    return run


@pytest.fixture()
def deserialize(confluent: Any) -> Callable[[str, list[bytes]], list[Any]]:
    """``deserialize(topic, blobs)``: confluent-kafka's AvroDeserializer (writer schema by id)."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    def run(topic: str, blobs: list[bytes]) -> list[Any]:
        deserializer = AvroDeserializer(confluent)
        context = SerializationContext(topic, MessageField.VALUE)
        return [deserializer(blob, context) for blob in blobs]

    return run
