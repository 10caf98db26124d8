"""The fast worker start in a real Spark: the Python processes Spark starts for a source
registered by ``kafka_direct.source.registration`` import PySpark from site-packages, not from
``pyspark.zip``. Probed with a tiny source whose offsets and rows report where PySpark came from:
the streaming source runner (a fresh process per query) and an executor's read task."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyspark

from kafka_direct.source.registration import WORKER_SITE_DIR, register_with_worker_site

SITE_PACKAGES_PYSPARK = str(Path(pyspark.__file__))


def _probe_source() -> Any:
    """Defined in a function so that cloudpickle ships it by value to Spark's processes."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )

    def where() -> str:
        import sys

        return str(sys.modules["pyspark"].__file__)

    class ProbeReader(DataSourceReader):
        def read(self, partition: InputPartition) -> Any:
            yield (where(),)

    class ProbeStreamReader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, Any]:
            return {"runner": where(), "n": 0}

        def latestOffset(self) -> dict[str, Any]:
            return {"runner": where(), "n": 1}

        def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
            return [InputPartition(0)] if start["n"] < end["n"] else []

        def read(self, partition: InputPartition) -> Any:
            yield (where(),)

    class ProbeSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_direct_site_probe"

        def schema(self) -> str:
            return "pyspark_file string"

        def reader(self, schema: Any) -> DataSourceReader:
            return ProbeReader()

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return ProbeStreamReader()

    return ProbeSource


def test_registered_source_processes_import_pyspark_from_site_packages(
    spark: Any, tmp_path: Path
) -> None:
    source = _probe_source()
    assert register_with_worker_site(spark, source)
    env = (
        spark._jsparkSession.sessionState()
        .dataSourceManager()
        .lookupDataSource(source.name())
        .dataSourceCls()
        .envVars()
    )
    assert env["PYTHONPATH"].split(":")[0] == WORKER_SITE_DIR

    # an executor's read task
    rows = spark.read.format(source.name()).load().collect()
    assert [r.pyspark_file for r in rows] == [SITE_PACKAGES_PYSPARK]

    # the streaming source runner, through the offsets it reports, and the stream's read task
    seen: list[str] = []
    query = (
        spark.readStream.format(source.name())
        .load()
        .writeStream.foreachBatch(lambda df, _id: seen.extend(r[0] for r in df.collect()))
        .option("checkpointLocation", str(tmp_path / f"ckpt-{uuid.uuid4().hex[:8]}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    runner_files = {
        json.loads(source_progress.endOffset)["runner"]
        for progress in query.recentProgress
        for source_progress in progress.sources
    }
    assert runner_files == {SITE_PACKAGES_PYSPARK}
    assert seen == [SITE_PACKAGES_PYSPARK]


def test_spark_own_registration_imports_pyspark_from_its_zip(spark: Any) -> None:
    # The control: the same probe registered the plain way reads PySpark from the zip, so the
    # test above can fail.
    source = _probe_source()
    spark.dataSource.register(source)
    rows = spark.read.format(source.name()).load().collect()
    assert len(rows) == 1
    assert "pyspark.zip" in rows[0].pyspark_file


def test_register_says_what_it_did_and_takes_the_private_path_in_this_pyspark(
    spark: Any, caplog: Any
) -> None:
    """Pinned to the installed PySpark: when its internals change, register() still works (the
    public way) but this test fails on the WARNING, instead of queries just starting slower."""
    import logging

    import kafka_direct
    from kafka_direct.source import registration
    from kafka_direct.source.datasource import KafkaDirectDataSource

    registration._logged.clear()
    caplog.set_level(logging.INFO, logger=registration.__name__)
    # register() leaves a session that has the format alone (once per session), and this one
    # has it: take the path register() takes for a new session, directly.
    assert registration.register_with_worker_site(spark, KafkaDirectDataSource)
    records = [r for r in caplog.records if r.name == registration.__name__]
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert any(m.startswith("Registered kafka_direct through PySpark's internal") for m in infos)
    assert any(WORKER_SITE_DIR in m and "sitecustomize" in m for m in infos)
    env = (
        spark._jsparkSession.sessionState()
        .dataSourceManager()
        .lookupDataSource(kafka_direct.FORMAT)
        .dataSourceCls()
        .envVars()
    )
    assert env["PYTHONPATH"].split(":")[0] == WORKER_SITE_DIR
