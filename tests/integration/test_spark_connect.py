"""kafka_direct through Spark Connect: a Connect server started from the pip PySpark's
``spark-submit`` (its ``SparkConnectServer``, local[2]), and a client in a subprocess (this
process already runs the suite's classic session). The client registers the data source the
public way (a Connect session has no JVM to reach) and reads known records, in a batch and in a
``Trigger.AvailableNow`` stream: exactly those records, with their content.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from kafka_direct.testing.ports import free_port
from tests.integration.kafka_helpers import produce_known

ROOT = Path(__file__).resolve().parents[2]
STARTED = "Spark Connect server started"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
    port = free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = dict(
        os.environ,
        SPARK_HOME=spark_home,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [os.path.join(spark_home, "bin", "spark-submit"),
             "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--master", "local[2]",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.driver.bindAddress=127.0.0.1",
             "--conf", "spark.driver.host=127.0.0.1",
             "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while STARTED not in log.read_text(errors="replace"):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"The Spark Connect server did not start:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _client(remote: str, bootstrap: str, topic: str, checkpoint: str) -> None:
    """The Connect client, in a subprocess: prints one JSON line of what it read."""
    from pyspark.sql import SparkSession

    import kafka_direct

    spark = SparkSession.builder.remote(remote).getOrCreate()
    kafka_direct.register(spark)

    def rows(df: Any) -> list[list[Any]]:
        return sorted(
            [r["partition"], r["offset"], r["key"] and r["key"].decode(), r["value"].decode()]
            for r in df.collect()
        )

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    batch = rows(spark.read.format("kafka_direct").options(**options).load())
    stream = (
        spark.readStream.format("kafka_direct")
        .options(**options)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "7")  # several micro-batches
        .load()
        .writeStream.format("memory")
        .queryName("connect_stream")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    stream.awaitTermination(120)
    streamed = rows(spark.sql("SELECT * FROM connect_stream"))
    print("RESULT " + json.dumps({"batch": batch, "stream": streamed}), flush=True)
    spark.stop()


def test_batch_and_stream_reads_through_spark_connect_are_exact(
    connect_server, make_topic, kafka_bootstrap, tmp_path
):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=20, partitions=2)
    expected = sorted(
        [r.partition, r.offset, r.key and r.key.decode(), r.value.decode()] for r in produced
    )
    code = (
        "from tests.integration.test_spark_connect import _client; "
        f"_client({connect_server!r}, {kafka_bootstrap!r}, {topic!r}, {str(tmp_path / 'ck')!r})"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, f"client failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    got = json.loads(results[-1][len("RESULT ") :])
    assert got["batch"] == expected
    assert got["stream"] == expected
