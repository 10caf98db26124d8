"""Running a kafka_direct stream into a foreachBatch collector, for integration tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tests.integration.kafka_helpers import Record


class Collector:
    """A foreachBatch sink that keeps every row and the size of every batch.

    Idempotent by batch id, as a foreachBatch sink must be: Spark re-runs the last batch after a
    restart when its commit was not written yet (a stop or crash right after the function
    returned). The source promises that the re-run reads exactly what the first run read, so a
    re-run batch is compared with the original, and any difference is kept in ``mismatches``;
    its rows are not added twice. A record read again under a *new* batch id is a duplicate.
    """

    def __init__(self) -> None:
        self.rows: list[Record] = []
        self.batches: list[tuple[int, list[Record]]] = []
        self.replayed: list[int] = []
        self.mismatches: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [
            Record(
                r["topic"],
                r["partition"],
                r["offset"],
                r["key"],
                r["value"],
                0,
            )
            for r in df.select("topic", "partition", "offset", "key", "value").collect()
        ]
        with self._lock:
            earlier = [seen for bid, seen in self.batches if bid == batch_id]
            if earlier:
                self.replayed.append(batch_id)
                if _sorted_keys(earlier[0]) != _sorted_keys(rows):
                    self.mismatches.append(batch_id)
                return
            self.rows.extend(rows)
            self.batches.append((batch_id, rows))

    @property
    def sizes(self) -> list[int]:
        with self._lock:
            return [len(rows) for _, rows in self.batches]

    def keys(self) -> list[tuple[str, int, int, bytes | None, bytes]]:
        with self._lock:
            return _sorted_keys(self.rows)


def expected_keys(records: list[Record]) -> list[tuple[str, int, int, bytes | None, bytes]]:
    return _sorted_keys(records)


def _sorted_keys(records: list[Record]) -> list[tuple[str, int, int, bytes | None, bytes]]:
    # A recreated topic repeats offsets, so ties fall through to keys, which may be null.
    return sorted(
        ((r.topic, r.partition, r.offset, r.key, r.value) for r in records),
        key=lambda k: (k[0], k[1], k[2], k[3] or b"", k[4]),
    )


def start(df: Any, sink: Collector, checkpoint: str, **trigger: Any) -> Any:
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    writer = writer.trigger(**(trigger or {"processingTime": "500 milliseconds"}))
    return writer.start()


def wait_for(
    condition: Callable[[], bool], query: Any, timeout_s: float = 90.0, what: str = "condition"
) -> None:
    """Wait until `condition()` holds; fail fast if the query died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        error = query.exception()
        if error is not None:
            raise AssertionError(f"query failed while waiting for {what}: {error}")
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
