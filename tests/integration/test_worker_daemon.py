"""kafka_direct's Python worker daemon in a real local Spark (kafka_direct.testing.local sets
``spark.python.daemon.module`` when the workers run the driver's interpreter): the workers that
read Kafka are forked from it, it preloaded every module it meant to, and the read is exact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.integration.kafka_helpers import produce_known


def _daemon_of_this_worker(_: Any) -> tuple[str | None, tuple[str, ...] | None]:
    import sys

    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    failed = getattr(main, "FAILED", None)
    return getattr(spec, "name", None), None if failed is None else tuple(failed)


def test_the_workers_fork_from_kafka_directs_daemon_and_read_exactly(
    spark: Any, kafka_bootstrap: str, make_topic: Callable[..., str], reader: Callable[..., Any]
) -> None:
    topic = make_topic(partitions=2)
    records = produce_known(kafka_bootstrap, topic, per_partition=50, partitions=2)
    rows = (
        reader(subscribe=topic, startingOffsets="earliest")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .collect()
    )
    assert sorted((r.partition, r.offset, r.value) for r in rows) == sorted(
        (r.partition, r.offset, r.value.decode()) for r in records
    )
    seen = set(spark.sparkContext.parallelize(range(4), 2).map(_daemon_of_this_worker).collect())
    # Each worker's __main__ is the daemon it was forked from; FAILED lists what it could not
    # preload, inherited by the worker.
    assert seen == {("kafka_direct.executor.daemon", ())}
