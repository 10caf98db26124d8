"""One exactly-once write task outside Spark, in a process of its own, for the fencing and
transaction-timeout tests (test_sink_exactly_once.py): the test can stop it with its
transaction open and let another attempt of the same task take over.

    python eos_task.py BOOTSTRAP TOPIC PREFIX BATCH_ID TAG PAUSE TRANSACTION_TIMEOUT_MS

Writes 20 records ``TAG-0`` .. ``TAG-19`` as partition 0 of micro-batch BATCH_ID, in two Arrow
batches. With PAUSE=1 the process stops itself (SIGSTOP) between the two, once the first ten
are in the partition's log (in its open transaction), and prints ``PAUSING`` first. It prints
``COMMITTED n``, ``SKIPPED n`` or ``FAILED: <message>`` (exit status 3).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.types import BinaryType, StructField, StructType

from kafka_direct.errors import KafkaDirectError
from kafka_direct.producer.markers import TaskIdentity
from kafka_direct.producer.transactional import write_transaction
from kafka_direct.source.sink import build_settings

SCHEMA = StructType([StructField("value", BinaryType())])


def _on_broker(bootstrap: str, topic: str, count: int) -> None:
    """Wait until the partition's log holds ``count`` records (open transaction or not)."""
    # read_uncommitted: ListOffsets then answers the log end, not the last stable offset.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-task-watch",
            "isolation.level": "read_uncommitted",
        }
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if end >= count:
                return
            time.sleep(0.1)
        raise TimeoutError(f"{count} records did not reach {topic}-0")
    finally:
        consumer.close()


def _rows(bootstrap: str, topic: str, tag: str, pause: bool) -> Iterator[pa.RecordBatch]:
    for half in range(2):
        values = [f"{tag}-{i}".encode() for i in range(half * 10, half * 10 + 10)]
        yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])
        if pause and half == 0:
            _on_broker(bootstrap, topic, 10)  # the ten records are in the open transaction
            print("PAUSING", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)


def main(
    bootstrap: str, topic: str, prefix: str, batch_id: str, tag: str, pause: str, timeout_ms: str
) -> int:
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "topic": topic,
        "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": prefix,
        "kafka.transaction.timeout.ms": timeout_ms,
        "kafka.delivery.timeout.ms": timeout_ms,
    }
    settings = build_settings(options, SCHEMA, stream=True)
    task = TaskIdentity(0, batch_id=int(batch_id))
    try:
        result = write_transaction(settings, _rows(bootstrap, topic, tag, pause == "1"), task)
    except KafkaDirectError as exc:
        print(f"FAILED: {exc}", flush=True)
        return 3
    print(f"{'SKIPPED' if result.skipped else 'COMMITTED'} {result.records}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:8]))
