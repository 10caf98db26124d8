"""The write baselines, one child process per partition: a plain confluent-kafka producer loop
(the "raw" of writing) and kafka_direct's C extension on its own (the floor). Runs in the
children that :class:`~kafka_direct_bench.raw.RawReaders` spawns before Spark starts.

- :func:`raw_write_partition`: the loop everyone writes first: ``produce`` one record at a time
  from a list of ready-made values, ``poll(0)`` now and then, a full queue (``BufferError``)
  waited out with ``poll``, ``flush`` at the end. With the sink's producer settings it is
  "raw", the baseline of every write ratio: idempotence, ``acks=all``, ``murmur2_random``,
  ``linger.ms=50``, the bounded queue (``kafka_direct.config.clients.producer_config``). With
  librdkafka's defaults it is shown for transparency only: idempotence caps a connection at 5
  requests in flight, which costs throughput on the embedded broker, so only like compares
  with like.
- :func:`native_write_partition`: kafka_direct's write fast path without Spark
  (``NativeBatchProducer.produce_batch`` over Arrow batches of 10,000 rows, Spark's
  ``maxRecordsPerBatch``), with the sink's settings: the least that writing Kafka costs here.

Both write their share of the records keyless to the whole topic, as the Spark write does (its
DataFrame has only a value column): the partitioner places them. Both return the wall and CPU
times of their loop (``time.process_time``: every thread of the child, librdkafka's included).
This module imports neither pyarrow nor kafka_direct at import time: the raw children must stay
small (see ``raw.py``).
"""

from __future__ import annotations

import random
import time
from typing import Any

#: Arrow batch rows handed to the C path at once (Spark's arrow.maxRecordsPerBatch default).
ARROW_ROWS = 10_000
DELIVERY_TIMEOUT_S = 300.0  # a hang guard for the final flush, not a deadline

WriteTask = tuple[
    str, str, int, int, int, dict[str, str]
]  # bootstrap, topic, count, size, seed, config


def sink_settings(bootstrap: str) -> dict[str, str]:
    """The sink's librdkafka settings (what ``df.write.format("kafka_direct")`` uses)."""
    from kafka_direct.config.sink import parse_sink_options

    options = {"kafka.bootstrap.servers": bootstrap, "topic": "unused"}
    return dict(parse_sink_options(options).producer)


def defaults_settings(bootstrap: str) -> dict[str, str]:
    """librdkafka's defaults: no idempotence, consistent_random, linger.ms=5, 1 GB queue."""
    return {"bootstrap.servers": bootstrap}


def values(size: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(size) for _ in range(1024)]


def raw_write_partition(task: WriteTask) -> dict[str, Any]:
    """One plain producer loop (see the module docstring). Runs in a child."""
    from confluent_kafka import Producer

    _bootstrap, topic, count, size, seed, config = task
    data = values(size, seed)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 10:
            errors.append(str(err))

    # Only failures are reported, as the sink has it: a success costs no Python call.
    producer = Producer(
        {**config, "client.id": "kafka-direct-bench-raw-writer",
         "delivery.report.only.error": True, "on_delivery": on_delivery}
    )  # fmt: skip
    produce, poll = producer.produce, producer.poll
    cpu0, t0 = time.process_time(), time.time()
    for i in range(count):
        value = data[i & 1023]
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.002)
        if not i & 8191:
            poll(0)
    left = producer.flush(DELIVERY_TIMEOUT_S)
    t1, cpu1 = time.time(), time.process_time()
    if left or errors:
        raise RuntimeError(f"raw writer: {left} record(s) not delivered; errors: {errors[:3]}")
    return {"rows": count, "start": t0, "end": t1, "cpu_s": cpu1 - cpu0}


def native_write_partition(task: WriteTask) -> dict[str, Any]:
    """kafka_direct's C write path without Spark (see the module docstring). Runs in a child."""
    import pyarrow as pa

    from kafka_direct.producer import native
    from kafka_direct.producer.columns import plan_columns

    _bootstrap, topic, count, size, seed, config = task
    if not native.available():
        raise RuntimeError(f"the C write path is not available: {native.status()}")
    data = values(size, seed)
    column = pa.array([data[i & 1023] for i in range(ARROW_ROWS)], pa.binary())
    batch = pa.record_batch([column], names=["value"])
    columns = plan_columns([("value", "binary")], topic)
    producer = native.NativeBatchProducer(config)
    cpu0, t0 = time.process_time(), time.time()
    for start in range(0, count, ARROW_ROWS):
        producer.produce_batch(batch.slice(0, min(ARROW_ROWS, count - start)), columns)
    producer.flush(DELIVERY_TIMEOUT_S)
    t1, cpu1 = time.time(), time.process_time()
    producer.close()
    return {"rows": count, "start": t0, "end": t1, "cpu_s": cpu1 - cpu0}
