"""``kafka_direct_wal``: the receiver stream's batches, read from its write-ahead log. Runs in
Spark's Python processes: the driver's planner (``partitions``) and executors (``read``).

An internal format, registered by ``KafkaUtils.createStream`` (:func:`register_wal_source`):
each batch is one ``spark.read.format("kafka_direct_wal")`` over exactly the blocks the driver
chose (the ``blocks`` option, paths relative to ``walDir``). Executors read the blocks' Arrow
IPC files from the shared directory and hand their record batches to Spark unchanged: the
receivers wrote them with the source's own Arrow schema, so a receiver batch has exactly the
rows and columns of a direct batch (:mod:`kafka_direct.consumer.rows`).

Blocks are grouped into at most ``numPartitions`` tasks, keeping their order, so a backlog of
small blocks does not become a task per block.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kafka_direct.consumer.rows import schema_ddl
from kafka_direct.dstream.receiver.wal import read_block
from kafka_direct.errors import ConfigurationError
from kafka_direct.logs import ensure_worker_logging
from kafka_direct.source.registration import register_once

__all__ = [
    "FORMAT",
    "WalBlocksDataSource",
    "WalBlocksPartition",
    "WalBlocksReader",
    "register_wal_source",
]

#: The internal format's name.
FORMAT = "kafka_direct_wal"


class WalBlocksPartition(InputPartition):
    """One task: some blocks, oldest first."""

    def __init__(self, refs: Sequence[str]) -> None:
        super().__init__(list(refs))
        self.refs = list(refs)

    def __repr__(self) -> str:
        return f"WalBlocksPartition({len(self.refs)} block(s))"


class WalBlocksReader(DataSourceReader):
    def __init__(self, root: str, refs: Sequence[str], num_partitions: int) -> None:
        self.root = root
        self.refs = list(refs)
        self.num_partitions = max(1, num_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        n = min(self.num_partitions, len(self.refs))
        if n == 0:
            return [WalBlocksPartition([])]
        size, extra = divmod(len(self.refs), n)
        groups, start = [], 0
        for i in range(n):
            end = start + size + (1 if i < extra else 0)
            groups.append(WalBlocksPartition(self.refs[start:end]))
            start = end
        return groups

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ensure_worker_logging()
        for ref in getattr(partition, "refs", []):
            yield from read_block(self.root, ref)


class WalBlocksDataSource(DataSource):
    """``spark.read.format("kafka_direct_wal")``: options ``walDir``, ``blocks`` (a JSON list),
    ``includeHeaders`` and ``numPartitions``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return schema_ddl(self._option("includeHeaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        refs = json.loads(self._option("blocks", "[]"))
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise ConfigurationError("blocks", refs, "a JSON list of block paths")
        return WalBlocksReader(
            self._option("walDir", ""), refs, int(self._option("numPartitions", "1"))
        )

    def _option(self, name: str, default: str) -> str:
        for key, value in self.options.items():
            if key.lower() == name.lower():
                return str(value)
        return default


def register_wal_source(spark: Any, *, fast_worker_start: bool = True) -> None:
    """Register ``kafka_direct_wal`` (:class:`WalBlocksDataSource`) in ``spark``, with the
    workers' environment of :mod:`kafka_direct.source.registration` when it can."""
    register_once(spark, WalBlocksDataSource, fast_worker_start=fast_worker_start)
