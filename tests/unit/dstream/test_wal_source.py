"""``kafka_direct_wal``, the receiver stream's internal batch format
(kafka_direct.dstream.receiver.wal_source): its schema is the source's, blocks are grouped into
tasks in order, and a task yields its blocks' Arrow batches unchanged. No Spark session: the data
source and reader are called directly, as PySpark's workers call them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_direct.consumer.rows import ARROW_SCHEMA, schema_ddl
from kafka_direct.dstream.receiver.wal import BlockMeta, BlockWriter
from kafka_direct.dstream.receiver.wal_source import WalBlocksDataSource, WalBlocksReader
from kafka_direct.errors import ConfigurationError
from tests.unit.dstream.test_wal import batch


def _blocks(root: Path, n: int) -> list[str]:
    writer = BlockWriter(str(root), "r1", durable=True, schema=ARROW_SCHEMA)
    return [
        writer.append(
            [batch(2, 2 * i)],
            BlockMeta(0, "r1", time.time_ns(), 2, (("t", 0, 2 * i, 2 * i + 2, 2),)),
        )
        for i in range(n)
    ]


def test_the_schema_is_the_sources_with_and_without_headers() -> None:
    assert WalBlocksDataSource({}).schema() == schema_ddl(False)
    assert WalBlocksDataSource({"includeHeaders": "true"}).schema() == schema_ddl(True)


@pytest.mark.parametrize(
    ("blocks", "tasks", "sizes"), [(5, 2, [3, 2]), (2, 8, [1, 1]), (0, 3, [0])]
)
def test_blocks_are_grouped_into_at_most_num_partitions_tasks_in_order(
    tmp_path: Path, blocks: int, tasks: int, sizes: list[int]
) -> None:
    refs = _blocks(tmp_path, blocks)
    parts = WalBlocksReader(str(tmp_path), refs, tasks).partitions()
    assert [len(p.refs) for p in parts] == sizes  # type: ignore[attr-defined]
    assert [r for p in parts for r in p.refs] == refs  # type: ignore[attr-defined]


def test_a_task_yields_its_blocks_batches_unchanged(tmp_path: Path) -> None:
    refs = _blocks(tmp_path, 3)
    source = WalBlocksDataSource(
        {"walDir": str(tmp_path), "blocks": json.dumps(refs), "numPartitions": "1"}
    )
    reader = source.reader(None)  # type: ignore[arg-type]
    [part] = reader.partitions()
    table = pa.Table.from_batches(list(reader.read(part)))
    assert table.schema == ARROW_SCHEMA
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5]


def test_a_bad_blocks_option_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'blocks'"):
        WalBlocksDataSource({"blocks": '{"a": 1}'}).reader(None)  # type: ignore[arg-type]
