"""The exactly-once stream sink through four SIGKILLs of its driver, each at a point chosen by
construction, while every task's first attempt fails, on real Kafka and a real local Spark:
every record once, none lost. A file of its own so that the serial run's two workers take the
two variants at once (the case is in test_sink_exactly_once.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_sink_exactly_once import (
    transactions_cluster,
    writes_each_record_once_through_driver_sigkills,
)


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    yield from transactions_cluster()


@pytest.mark.serial
@pytest.mark.slow
def test_a_stream_writes_each_record_once_through_driver_sigkills_while_tasks_fail_once(
    bootstrap: str, tmp_path: Path
) -> None:
    writes_each_record_once_through_driver_sigkills(bootstrap, tmp_path, fail_first=True)
