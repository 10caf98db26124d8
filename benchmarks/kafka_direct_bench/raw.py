"""The raw baselines, one child process per partition, and the latency run's paced producer.

- :func:`raw_read_partition`: plain confluent-kafka, reading every record and touching its
  value. This is "raw", the baseline of every ratio.
- :func:`arrow_read_partition`: kafka_direct's C extension on its own, with no Spark: librdkafka
  straight into Arrow batches, summing the value lengths. It shows what reading Kafka costs
  at the least on this machine, since the extension does less per record than any Python
  consumer.

These and :func:`paced_producer` run in child processes; :class:`RawReaders` drives them from
the benchmark process.

The children are spawned, so they import these functions by module name (see the package
docstring); they are spawned before Spark starts, so they stay small.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_direct_bench.procstats import cpu_snapshot, cpu_used

DELIVERY_TIMEOUT_S = 120.0  # a hang guard for the latency producer's flushes, not a deadline


def raw_consumer_config(bootstrap: str) -> dict[str, str]:
    """The executors' librdkafka settings (same fetch tunables), for a plain consumer: the ratio
    then measures what Spark and the source add, not a difference in client configuration."""
    from kafka_direct.config.clients import executor_consumer_config

    config = executor_consumer_config(
        {"bootstrap.servers": bootstrap},
        group_id="kafka-direct-bench-raw",
        isolation_level="read_uncommitted",
    )
    config["enable.partition.eof"] = "false"  # plain: no EOF events, every message is data
    config["client.id"] = "kafka-direct-bench-raw"
    return config


def raw_read_partition(task: tuple[dict[str, str], str, int, int, int, int]) -> dict[str, Any]:
    """One raw reader: assign, consume in batches, touch every value (``len``). Runs in a child."""
    config, topic, partition, start, until, batch = task
    t0 = time.time()
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, partition, start)])
    rows = total = 0
    nxt = start
    while nxt < until:
        msgs = consumer.consume(min(batch, until - nxt), 1.0)
        for m in msgs:
            total += len(m.value())
        if msgs:
            rows += len(msgs)
            nxt = msgs[-1].offset() + 1
    t1 = time.time()
    consumer.close()
    return {"partition": partition, "rows": rows, "bytes": total, "start": t0, "end": t1}


def arrow_read_partition(task: tuple[dict[str, str], str, int, int, int, int]) -> dict[str, Any]:
    """One reader through kafka_direct's extension (no Spark): Arrow batches, and the sum of
    their value lengths computed over the column. Runs in a child."""
    import pyarrow.compute as pc

    from kafka_direct.consumer.native import NativeConsumer

    config, topic, partition, start, until, batch = task
    t0 = time.time()
    consumer = NativeConsumer(config)
    consumer.assign([TopicPartition(topic, partition, start)])
    rows = total = 0
    nxt = start
    while nxt < until:
        got = consumer.consume_batch(topic, partition, nxt, until, min(batch, until - nxt), 1.0)
        if got is None:
            continue
        records, last, _beyond, _eof, error = got
        if error is not None:
            raise RuntimeError(f"reading {topic}-{partition}: {error}")
        if records is not None:
            rows += records.num_rows
            total += pc.sum(pc.binary_length(records.column("value"))).as_py() or 0
        if last >= 0:
            nxt = last + 1
    t1 = time.time()
    consumer.close()
    return {"partition": partition, "rows": rows, "bytes": total, "start": t0, "end": t1}


def paced_producer(task: tuple[str, str, int, int, float, int, int]) -> dict[str, Any]:
    """The latency run's producer: ``rate`` records/s for ``seconds``, in 10 ms ticks. Child.

    It reports the records the broker acknowledged, and fails unless every one was: the
    latency check compares the rows the query saw with this count."""
    bootstrap, topic, partitions, rate, seconds, size, seed = task
    value = random.Random(seed).randbytes(size)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "5", "client.id": "kafka-direct-bench-lat"}
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    def produce(partition: int) -> None:
        while True:
            try:
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:  # the local queue is full: let the broker catch up
                producer.poll(0.05)

    tick = 0.01
    per_tick = max(1, round(rate * tick))
    sent = 0
    start = time.monotonic()
    deadline = start + seconds
    next_tick = start
    while next_tick < deadline:
        for _ in range(per_tick):
            produce(sent % partitions)
            sent += 1
        producer.poll(0)
        next_tick += tick
        pause = next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    undelivered = producer.flush(DELIVERY_TIMEOUT_S)
    # The embedded broker's log end lags by one record batch (BROKER.md): a lone final record
    # per partition makes every record above visible.
    for p in range(partitions):
        produce(p)
        sent += 1
        undelivered = producer.flush(DELIVERY_TIMEOUT_S)  # all still queued: the last counts
    if undelivered or errors:
        raise RuntimeError(
            f"latency producer: {undelivered} of {sent:,} records not delivered within "
            f"{DELIVERY_TIMEOUT_S:g} s; errors: {errors[:3]}"
        )
    return {"sent": sent, "seconds": time.monotonic() - start}


class RawReaders:
    """A pool of P warm child processes (spawned once, before Spark starts): the raw readers,
    and the write baselines (:meth:`map`)."""

    def __init__(self, processes: int) -> None:
        self._pool = multiprocessing.get_context("spawn").Pool(processes)

    def read(
        self, bootstrap: str, topic: str, counts: list[int], batch: int, arrow: bool = False
    ) -> dict[str, Any]:
        """Every partition read by a child: plain confluent-kafka, or with ``arrow`` the
        extension on its own (:func:`arrow_read_partition`)."""
        config = raw_consumer_config(bootstrap)
        tasks = [(config, topic, p, 0, n, batch) for p, n in enumerate(counts) if n > 0]
        reader = arrow_read_partition if arrow else raw_read_partition
        cpu = cpu_snapshot()
        t0 = time.time()
        results = self._pool.map(reader, tasks, chunksize=1)
        wall = time.time() - t0
        rows = sum(r["rows"] for r in results)
        window = max(r["end"] for r in results) - min(r["start"] for r in results)
        return {
            **cpu_used(cpu, rows),
            "rows": rows,
            "bytes": sum(r["bytes"] for r in results),
            "wall_s": wall,
            "rate": rows / wall,
            "task_window_s": window,
            "task_rate": rows / window if window > 0 else None,
        }

    def map(self, function: Any, tasks: list[Any]) -> list[Any]:
        """``function`` over ``tasks``, one task per child (the write baselines of
        :mod:`~kafka_direct_bench.write_children`)."""
        return self._pool.map(function, tasks, chunksize=1)

    def produce_paced(self, task: tuple[str, str, int, int, float, int, int]) -> Any:
        return self._pool.apply_async(paced_producer, (task,))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()
