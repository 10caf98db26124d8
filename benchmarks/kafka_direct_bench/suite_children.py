"""The suite's write floor: librdkafka through kafka_direct's C write path, no Spark, writing the
data set's own values with the sink's settings and the data set's codec. Runs in the children
that :class:`~kafka_direct_bench.raw.RawReaders` spawns before Spark starts (one task each).

The read floor is :func:`kafka_direct_bench.raw.arrow_read_partition` (librdkafka into Arrow,
no Spark). This one differs from :func:`kafka_direct_bench.write_children.native_write_partition`
only in its values: the data set's (JSON-like, or 1 MiB), rebuilt here from the data set's
name, so the floor compresses what the Spark rows compress. The content it writes is
:func:`floor_content`, which the benchmark process checks after reading the topic back.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from kafka_direct_bench.suite_data import DATASETS, values

#: Rows per Arrow batch: Spark's ``maxRecordsPerBatch`` default, fewer for large values (at
#: most 64 MiB of values in one batch).
ARROW_ROWS = 10_000
DELIVERY_TIMEOUT_S = 300.0  # a hang guard for the final flush, not a deadline

#: dataset name, topic, records, librdkafka settings
FloorTask = tuple[str, str, int, dict[str, str]]


def batch_rows(size: int) -> int:
    return max(1, min(ARROW_ROWS, (64 << 20) // max(size, 1)))


def floor_content(dataset_name: str, counts: list[int]) -> tuple[int, int, int]:
    """(records, value bytes, sum of crc32(value)) that the floor's tasks write."""
    vals = values(DATASETS[dataset_name])
    crcs = [zlib.crc32(v) for v in vals]
    n = len(vals)
    rows = size = crc = 0
    for count in counts:
        for i in range(count):
            rows += 1
            size += len(vals[i % n])
            crc += crcs[i % n]
    return rows, size, crc


def floor_write_partition(task: FloorTask) -> dict[str, Any]:
    """One task of the write floor: ``count`` records, keyless, to the whole topic."""
    import pyarrow as pa

    from kafka_direct.producer import native
    from kafka_direct.producer.columns import plan_columns

    name, topic, count, config = task
    if not native.available():
        raise RuntimeError(f"the C write path is not available: {native.status()}")
    vals = values(DATASETS[name])
    rows = batch_rows(DATASETS[name].size)
    columns = plan_columns([("value", "binary")], topic)
    producer = native.NativeBatchProducer(config)
    cpu0, t0 = time.process_time(), time.time()
    for start in range(0, count, rows):
        n = min(rows, count - start)
        column = pa.array([vals[(start + i) % len(vals)] for i in range(n)], pa.binary())
        producer.produce_batch(pa.record_batch([column], names=["value"]), columns)
    producer.flush(DELIVERY_TIMEOUT_S)  # raises unless every record was acknowledged
    t1, cpu1 = time.time(), time.process_time()
    producer.close()
    return {"rows": count, "start": t0, "end": t1, "cpu_s": cpu1 - cpu0}
