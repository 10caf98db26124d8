"""Unit tests for the exactly-once task's producer start (kafka_direct.producer.transactional):
the order of its first calls to librdkafka. No broker, no Spark: a recorder stands in for
confluent-kafka's Producer."""

from __future__ import annotations

from kafka_direct.producer.transactional import TransactionalProducer


class _Recorder:
    """A stand-in for confluent-kafka's Producer that records the calls made to it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def list_topics(self, *args: object) -> None:
        self.calls.append(("list_topics", args))

    def init_transactions(self, *args: object) -> None:
        self.calls.append(("init_transactions", args))


def test_a_task_reads_metadata_before_it_asks_for_its_transaction_coordinator() -> None:
    """librdkafka asks for the coordinator on the bootstrap connection if it is still up, and
    when that connection is dropped under the request it asks again only 500 ms later: a task's
    producer first waits for two metadata answers (on the marker topic, which exists): the
    first may come from the bootstrap connection, the second from a broker by its id."""
    producer = TransactionalProducer.__new__(TransactionalProducer)
    recorder = _Recorder()
    producer._producer = recorder  # type: ignore[assignment]
    producer.init_transactions(30.0, "markers")
    metadata = ("list_topics", ("markers", 30.0))
    assert recorder.calls == [metadata, metadata, ("init_transactions", (30.0,))]
