"""An exactly-once task whose cluster freezes mid-transaction fails while the cluster is still
frozen, with its own error, and writes nothing (KafkaCluster, a real broker SIGSTOPped).

Regression (review): the failing task aborted with a 10 s limit, then closed its producer, and
confluent-kafka's close() aborts again and flushes with no limit: the task, and its micro-batch,
hung for as long as the cluster stayed away.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from kafka_direct.producer.markers import TaskIdentity
from kafka_direct.producer.transactional import write_transaction
from kafka_direct.testing.kafka_cluster import KafkaCluster
from kafka_direct.testing.topics import create_topic
from tests.integration.test_sink_exactly_once import _batches as batches
from tests.integration.test_sink_exactly_once import _settings as settings_for

#: How long the broker stays frozen: the task must have failed before it resumes.
FROZEN_S = 90.0


class UpstreamFailed(RuntimeError):
    """What the task's input raises once the broker is frozen."""


def test_a_task_whose_cluster_freezes_fails_before_the_cluster_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kafka_direct.source import sink

    monkeypatch.setattr(sink, "_checked", {})
    with KafkaCluster() as cluster:
        topic = "frozen-eos"
        create_topic(cluster.bootstrap_servers, topic, partitions=1)
        settings = settings_for(
            cluster.bootstrap_servers, topic, transactionalIdPrefix="frozen-eos"
        )

        def rows() -> Iterator[pa.RecordBatch]:
            yield from batches([f"v{i}".encode() for i in range(50)])
            cluster.pause_broker(1)  # the transaction is open, its records sent or queued
            raise UpstreamFailed("the task's input failed after the cluster froze")

        outcome: dict[str, Any] = {}

        def task() -> None:
            try:
                write_transaction(settings, rows(), TaskIdentity(0, batch_id=0))
            except BaseException as exc:  # noqa: BLE001 - the outcome is checked below
                outcome["error"] = exc

        runner = threading.Thread(target=task, daemon=True)
        runner.start()
        runner.join(FROZEN_S)
        failed_while_frozen = not runner.is_alive()
        cluster.resume_broker(1)
        runner.join(120)
        assert failed_while_frozen, f"the task was still running {FROZEN_S:g} s into the freeze"
        assert isinstance(outcome.get("error"), UpstreamFailed), outcome
        # Nothing of the aborted transaction is visible to read_committed readers.
        reader = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "frozen-check",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        try:
            reader.assign([TopicPartition(topic, 0, 0)])
            seen = []
            while True:
                message = reader.poll(30)
                assert message is not None, "no end of partition within 30 s"
                if message.error():
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    break
                seen.append(message.value())
        finally:
            reader.close()
        assert seen == []
