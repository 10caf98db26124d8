"""How many tasks the source's packing aims at: a batch read by the planning machine's cores, a
stream by a constant, so that a micro-batch replayed on a driver with other cores is split into
the same tasks (the exactly-once sink matches a replayed task to what its first attempt
committed); minPartitions wins in both. Pure: no Spark session, no broker."""

from __future__ import annotations

import pytest

from kafka_direct.config.source import parse_source_options
from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.packing import pack_ranges
from kafka_direct.source import common
from kafka_direct.source.common import STREAM_PACKING_PARALLELISM, packing_settings

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "events"}


@pytest.mark.parametrize(
    ("extra", "stream", "cores", "expected"),
    [
        pytest.param({}, False, 2, 2, id="batch read: the driver's cores"),
        pytest.param({}, False, 16, 16, id="batch read on a bigger driver"),
        pytest.param({}, True, 2, STREAM_PACKING_PARALLELISM, id="stream: a constant"),
        pytest.param({}, True, 16, STREAM_PACKING_PARALLELISM, id="stream on a bigger driver"),
        pytest.param({"minPartitions": "8"}, True, 16, 8, id="stream: minPartitions wins"),
        pytest.param({"minPartitions": "8"}, False, 2, 8, id="batch read: minPartitions wins"),
    ],
)
def test_parallelism(extra: dict[str, str], stream: bool, cores: int, expected: int) -> None:
    opts = parse_source_options({**BASE, **extra}, streaming=stream)
    assert packing_settings(opts, stream=stream, cpu_count=cores).parallelism == expected


def test_a_replayed_micro_batch_gets_the_same_tasks_on_a_driver_with_other_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opts = parse_source_options(BASE, streaming=True)
    ranges = [OffsetRange("events", p, 0, 10_000) for p in range(40)]
    plans = []
    for cores in (2, 4, 64):
        monkeypatch.setattr(common.os, "cpu_count", lambda cores=cores: cores)
        plans.append([p.ranges for p in common.input_partitions(opts, ranges, stream=True)])
    assert plans[0] == plans[1] == plans[2]
    # Packing still packs: 40 ranges in far fewer tasks.
    assert len(plans[0]) < len(ranges)
    # A batch read of the same ranges follows the cores (nothing replays it on another driver).
    monkeypatch.setattr(common.os, "cpu_count", lambda: 4)
    batch = parse_source_options(BASE, streaming=False)
    assert len(common.input_partitions(batch, ranges)) == len(
        pack_ranges(ranges, packing_settings(batch, cpu_count=4))
    )
