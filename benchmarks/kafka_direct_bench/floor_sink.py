"""Spark's own floor for writing: a Python data source whose Arrow writer only counts. Built in
the benchmark process; its writer runs in Spark's Python workers.

``df.write.format("kafka_direct_bench_count")`` hands the writer the same Arrow batches that
``format("kafka_direct")`` gets (``DataSourceArrowWriter``), and it counts their rows and value
bytes and writes nothing anywhere. Its time is what Spark itself costs to hand a DataFrame to any
Python writer: scanning it, turning rows into Arrow batches, and sending them to the worker.

The counts come back through a file, not the commit message: PySpark runs ``commit`` in a Python
worker of its own, not in the benchmark process. Each task appends one JSON line (the same
shape as the sink's task statistics, ``"kind": "count"``) to ``<dir>/tasks-<pid>.jsonl``.

The classes are defined inside :func:`floor_sink`, so cloudpickle ships them to the workers by
value and the workers need not import this package.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def floor_sink() -> Any:
    """The counting data source (imports pyspark: built lazily)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class CountWriter(DataSourceArrowWriter):
        def __init__(self, out_dir: str, label: str) -> None:
            self.out_dir, self.label = out_dir, label

        def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
            import json
            import os
            import time

            import pyarrow.compute as pc

            start = time.time()
            rows = size = batches = 0
            for batch in iterator:
                rows += batch.num_rows
                batches += 1
                value = batch.column(batch.schema.get_field_index("value"))
                size += pc.sum(pc.binary_length(value)).as_py() or 0
            line = {"role": "write", "topic": self.label, "rows": rows, "bytes": size,
                    "batches": batches, "start": start, "end": time.time(), "kind": "count",
                    "fast_path": False, "pid": os.getpid()}  # fmt: skip
            with open(os.path.join(self.out_dir, f"tasks-{os.getpid()}.jsonl"), "a") as out:
                out.write(json.dumps(line) + "\n")
            return WriterCommitMessage()

    class CountSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_bench_count"

        def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
            return CountWriter(self.options["dir"], self.options["label"])

    return CountSink
