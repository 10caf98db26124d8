"""The floor of a source-level Avro decode: a Python data source that yields ready-made Arrow
batches with the decoded ``value`` struct, reading no Kafka and decoding nothing while timed.
Built in the benchmark process; its reader runs in Spark's Python workers.

What Spark costs any Python source to take in rows of this struct (Arrow from the worker into
the JVM, and the struct's fields into Spark's rows). The classes are defined inside
:func:`decoded_floor_source`, so cloudpickle ships them to the workers by value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def decoded_floor_source(schema_text: str, sample: list[bytes]) -> Any:
    """A data source named ``kafka_direct_bench_decoded_floor`` whose rows are the source's with
    ``value`` decoded from ``sample`` (bare Avro records of ``schema_text``), repeated to the
    ``counts`` option's rows per partition."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kafka_direct.config.value_format import ValueFormat
    from kafka_direct.source.value_decode import row_schema, value_decode

    value_format = ValueFormat("avro", json_format_schema=schema_text, options={"mode": "FAILFAST"})

    class DecodedFloorReader(DataSourceReader):
        def __init__(self, counts: list[int]) -> None:
            self.counts = counts

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(len(self.counts))]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            from kafka_direct.consumer.rows import ARROW_SCHEMA

            rows = len(sample)
            raw = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(rows, pa.binary()),
                    pa.array(sample, pa.binary()),
                    pa.array(["bench-floor"] * rows, pa.string()),
                    pa.array([partition.value] * rows, pa.int32()),
                    pa.array(range(rows), pa.int64()),
                    pa.array([1_700_000_000_000_000] * rows, pa.timestamp("us", tz="UTC")),
                    pa.array([0] * rows, pa.int32()),
                ],
                schema=ARROW_SCHEMA,
            )
            decode = value_decode(value_format)
            assert decode is not None
            ready = decode.apply(raw)  # decoded once, before Spark times anything of ours
            n = self.counts[partition.value]
            while n > 0:
                yield ready if n >= rows else ready.slice(0, n)
                n -= rows

    class DecodedFloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_bench_decoded_floor"

        def schema(self) -> Any:
            return row_schema(False, value_decode(value_format))

        def reader(self, schema: Any) -> DataSourceReader:
            return DecodedFloorReader([int(c) for c in self.options["counts"].split(",")])

    return DecodedFloorSource
