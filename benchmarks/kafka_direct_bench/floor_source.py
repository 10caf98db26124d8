"""Spark's own floor: a Python data source with no Kafka work at all. Built in the benchmark
process; its reader runs in Spark's Python workers.

The classes are defined inside :func:`floor_source`, so cloudpickle ships them to the workers by
value and the workers need not import this package.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def floor_source() -> Any:
    """A data source that yields ready-made Arrow batches with kafka_direct's schema: what any
    Python data source costs in Spark, with nothing to read. Built lazily (imports pyspark)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    class FloorReader(DataSourceReader):
        def __init__(self, counts: list[int], size: int, batch: int) -> None:
            self.counts, self.size, self.batch = counts, size, batch

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(len(self.counts))]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            yield from self.rows(partition.value, self.counts[partition.value])

        def rows(self, p: int, n: int) -> Iterator[Any]:
            import pyarrow as pa

            from kafka_direct.consumer.rows import ARROW_SCHEMA

            rows = self.batch
            first = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"k" * 8] * rows, pa.binary()),
                    pa.array([b"v" * self.size] * rows, pa.binary()),
                    pa.array(["bench-floor-00000000"] * rows, pa.string()),
                    pa.array([p] * rows, pa.int32()),
                    pa.array(range(rows), pa.int64()),
                    pa.array([1_700_000_000_000_000] * rows, pa.timestamp("us", tz="UTC")),
                    pa.array([0] * rows, pa.int32()),
                ],
                schema=ARROW_SCHEMA,
            )
            while n > 0:
                yield first if n >= rows else first.slice(0, n)
                n -= rows

    class FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        """``micro_batches`` micro-batches of ``counts`` rows per partition each, then no more
        data: a streaming query's own cost per micro-batch (checkpoint writes, planning,
        scheduling, the sink).

        Like the Kafka read it is compared with (``maxOffsetsPerTrigger`` under
        ``Trigger.AvailableNow``), the query reads one micro-batch per trigger and ends by
        itself once it has read them all. It is never stopped from outside: ``query.stop()``
        during ``foreachBatch`` kills Spark's stream thread (see ``spark_reads``)."""

        def __init__(self, batch_reader: FloorReader, micro_batches: int) -> None:
            self.batch_reader = batch_reader
            self.micro_batches = micro_batches

        def initialOffset(self) -> dict[str, int]:
            return {"batch": 0}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(sum(self.batch_reader.counts))  # one micro-batch per trigger

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            if isinstance(limit, ReadAllAvailable):
                return {"batch": self.micro_batches}
            return {"batch": min(start["batch"] + 1, self.micro_batches)}

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # the end is fixed from the start: micro-batch ``micro_batches``

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            batches = end["batch"] - start["batch"]
            return [
                InputPartition((p, n * batches)) for p, n in enumerate(self.batch_reader.counts)
            ]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            p, n = partition.value
            return self.batch_reader.rows(p, n)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_bench_floor"

        def schema(self) -> str:
            from kafka_direct.consumer.rows import schema_ddl

            return schema_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            counts = [int(c) for c in self.options["counts"].split(",")]
            return FloorReader(counts, int(self.options["size"]), int(self.options["batch"]))

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            micro_batches = int(self.options.get("micro_batches", "1"))
            return FloorStreamReader(self.reader(schema), micro_batches)  # type: ignore[arg-type]

    return FloorSource
