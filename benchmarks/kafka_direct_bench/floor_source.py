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

    class FloorReader(DataSourceReader):
        def __init__(self, counts: list[int], size: int, batch: int) -> None:
            self.counts, self.size, self.batch = counts, size, batch

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(len(self.counts))]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            yield from self.rows(partition.value, self.counts[partition.value])

        def rows(self, p: int, n: int) -> Iterator[Any]:
            import pyarrow as pa

            from kafka_direct.rows import ARROW_SCHEMA

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

    class FloorStreamReader(DataSourceStreamReader):
        """Endless micro-batches of ``counts`` rows per partition each: a streaming query's own
        cost per micro-batch (checkpoint writes, planning, scheduling, the sink)."""

        def __init__(self, batch_reader: FloorReader) -> None:
            self.batch_reader = batch_reader

        def initialOffset(self) -> dict[str, int]:
            return {"batch": 0}

        def latestOffset(self) -> dict[str, int]:
            self.next = getattr(self, "next", 0) + 1
            return {"batch": self.next}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return self.batch_reader.partitions()

        def read(self, partition: InputPartition) -> Iterator[Any]:
            return self.batch_reader.read(partition)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_bench_floor"

        def schema(self) -> str:
            from kafka_direct.rows import schema_ddl

            return schema_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            counts = [int(c) for c in self.options["counts"].split(",")]
            return FloorReader(counts, int(self.options["size"]), int(self.options["batch"]))

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return FloorStreamReader(self.reader(schema))  # type: ignore[arg-type]

    return FloorSource
