"""Benchmark: decoding and encoding Confluent-framed Avro in Spark, records/s, same records.

- kafka_direct ``from_avro`` with a real Schema Registry (Apicurio, started here): the wire
  format, the writer schema looked up by the id in each header;
- Spark's own ``from_avro`` (the ``spark-avro`` jar from Maven Central) on the same bytes with
  the 5-byte header stripped by ``substring`` and the schema given as ``jsonFormatSchema``;
- plain ``fastavro.schemaless_reader`` in a loop in this process (one core, no Spark);
- an Arrow UDF that returns its binary input unchanged: what any column function costs in
  Spark before it does anything;
- kafka_direct's decoder alone (``AvroDecoder.decode``, the C decoder where it is built) on
  Arrow batches of 10,000 records in this process (one core, no Spark).

Writing (encoding) rows, on the same N records decoded into a cached struct column:

- kafka_direct ``to_avro`` in the wire format (the C encoder where it is built);
- the same with ``KAFKA_DIRECT_NATIVE_AVRO=0`` in its Python workers (fastavro);
- Spark's own ``to_avro`` (spark-avro) with the schema as ``jsonFormatSchema`` (bare Avro);
- an Arrow UDF that takes the struct column and returns empty binaries: what any ``to_avro``
  that is a column function costs before it writes a byte;
- kafka_direct's encoder alone (``AvroEncoder.encode``) on Arrow batches of 10,000 records in
  this process (one core, no Spark), with the C encoder and with fastavro.

Each write row is checked to write N records and the same number of bytes (Spark's without the
5-byte headers).

Every row decodes the same N records, cached in Spark's memory first, and materialises every
field (``write.format("noop")``). Each Spark row is checked to decode exactly N records and
the same sum of one field. Records per second of wall time are the issue's measure; records per
CPU second of the Spark JVM and its Python workers are printed too, since on a busy machine
wall time also measures the other jobs. Runs in the user's process (the Spark driver)::

    . scripts/setup.sh
    python benchmarks/schema_registry.py                # 200,000 records, 3 rounds
    python benchmarks/schema_registry.py --records 20000 --rounds 1   # a quick look
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import io
import json
import os
import statistics
import sys
import time
from typing import Any

import fastavro
import pyarrow as pa

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "scores", "type": {"type": "array", "items": "int"}},
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Device",
                "fields": [
                    {"name": "os", "type": "string"},
                    {"name": "version", "type": "int"},
                ],
            },
        },
    ],
}


def _records(count: int) -> list[dict[str, Any]]:
    base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    return [
        {
            "id": i,
            "user": f"user-{i % 10_000}",
            "amount": i * 0.25,
            "note": None if i % 3 else f"note {i}",
            "kind": "ABC"[i % 3],
            "at": base + datetime.timedelta(microseconds=i),
            "price": decimal.Decimal(i % 100_000) / 100,
            "scores": [i % 7, i % 11, i % 13],
            "device": {"os": "linux" if i % 2 else "mac", "version": i % 20},
        }
        for i in range(count)
    ]


def _spark_avro_version() -> str:
    """The newest spark-avro on Maven Central that is not newer than the installed PySpark."""
    import pyspark

    return os.environ.get("SPARK_AVRO_VERSION") or (
        "4.2.0" if pyspark.__version__.startswith("4.3") else pyspark.__version__
    )


def _time(function: Any) -> float:
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


def _tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by a process and all its descendants, the reaped ones included
    (from /proc): the Spark JVM and its Python workers. On a busy machine wall time measures
    the other jobs as much as ours; CPU time does not."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(pid)
        ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


_WRITE_ROWS = (
    "write_kafka_direct",
    "write_fastavro_udf",
    "write_spark_avro",
    "write_floor_udf",
    "c_encoder",
    "fastavro_encoder",
)


def _write_queries(
    spark: Any,
    decoded: Any,
    schema_text: str,
    registry_url: str,
    records: int,
    to_avro: Any,
    spark_to_avro: Any,
) -> tuple[list[tuple[str, Any]], str]:
    """The three Spark write rows on one cached struct column, each checked to write every
    record and the same bytes; and what encoder the Python workers used, as they say it."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    from kafka_direct.functions import _arrow_udf

    # A checkpoint, not decoded.cache(): caching would make the timed Spark from_avro row (the
    # same plan) read the cache instead of decoding.
    structs = decoded.localCheckpoint(eager=True)
    env = spark.sparkContext.environment

    def status(values: pa.Array) -> pa.Array:
        from kafka_direct.schema_registry import avro_encode_native

        return pa.array([avro_encode_native.status()] * len(values), pa.string())

    def ours(native: bool) -> tuple[Any, str]:
        # The environment a UDF's Python workers get is taken when its column is made.
        if not native:
            env["KAFKA_DIRECT_NATIVE_AVRO"] = "0"
        try:
            column = to_avro(
                "e", schema_text, subject="bench-value", schemaRegistryAddress=registry_url
            )
            said = _arrow_udf(status, StringType(), "status")(F.lit(1))
            told = structs.limit(1).select(said).first()[0]
        finally:
            env.pop("KAFKA_DIRECT_NATIVE_AVRO", None)
        return structs.select(column.alias("v")), told

    native, native_status = ours(True)
    python, python_status = ours(False)
    theirs = structs.select(spark_to_avro("e", schema_text).alias("v"))
    queries = [
        ("write_kafka_direct", native),
        ("write_fastavro_udf", python),
        ("write_spark_avro", theirs),
    ]
    sizes = {
        name: tuple(query.agg(F.count("v"), F.sum(F.length("v"))).first())
        for name, query in queries
    }
    spark_count, spark_bytes = sizes["write_spark_avro"]
    expected = (records, spark_bytes + 5 * records)
    if spark_count != records or any(sizes[n] != expected for n, _ in queries[:2]):
        print(f"FAILED check: bytes written {sizes}", file=sys.stderr)
        return [], ""
    if "C encoder" not in native_status or "NATIVE_AVRO=0" not in python_status:
        print(f"FAILED check: workers said {native_status!r}, {python_status!r}", file=sys.stderr)
        return [], ""

    def empty(values: pa.Array) -> pa.Array:
        """The floor of any to_avro that is a column function: the struct column goes to a
        Python worker as Arrow, and a binary column (of empty values) comes back."""
        offsets = pa.py_buffer(bytes(4 * (len(values) + 1)))
        return pa.Array.from_buffers(pa.binary(), len(values), [None, offsets, pa.py_buffer(b"")])

    floor = structs.select(_arrow_udf(empty, BinaryType(), "empty")("e").alias("v"))
    return [*queries, ("write_floor_udf", floor)], native_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro as spark_from_avro
    from pyspark.sql.avro.functions import to_avro as spark_to_avro
    from pyspark.sql.types import BinaryType

    from kafka_direct.functions import _arrow_udf, from_avro, to_avro
    from kafka_direct.schema_registry import avro_native
    from kafka_direct.schema_registry.avro_codec import AvroDecoder
    from kafka_direct.schema_registry.avro_encoder import AvroEncoder
    from kafka_direct.schema_registry.avro_read import spark_type_of
    from kafka_direct.schema_registry.client import RegistryClient
    from kafka_direct.schema_registry.options import parse_registry
    from kafka_direct.schema_registry.wire import header
    from kafka_direct.testing.local import local_spark
    from kafka_direct.testing.schema_registry import SchemaRegistry

    schema_text = json.dumps(SCHEMA)
    parsed = fastavro.parse_schema(SCHEMA)
    records = _records(args.records)
    bare: list[bytes] = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        bare.append(out.getvalue())
    expected_sum = sum(r["device"]["version"] for r in records)

    results: dict[str, list[float]] = {
        "kafka_direct": [],
        "spark_avro": [],
        "fastavro": [],
        "c_decoder": [],
        "identity_udf": [],
        "write_kafka_direct": [],
        "write_fastavro_udf": [],
        "write_spark_avro": [],
        "write_floor_udf": [],
        "c_encoder": [],
        "fastavro_encoder": [],
    }
    per_cpu_s: dict[str, list[float]] = {
        "kafka_direct": [],
        "spark_avro": [],
        "identity_udf": [],
        "write_kafka_direct": [],
        "write_fastavro_udf": [],
        "write_spark_avro": [],
        "write_floor_udf": [],
    }
    encoder_status = ""
    with SchemaRegistry() as registry:
        print(
            f"registry: Apicurio {registry.version} started in {registry.startup_s:.1f} s, "
            f"RSS {(registry.rss_bytes() or 0) / 2**20:.0f} MiB",
            flush=True,
        )
        client = RegistryClient(parse_registry(registry.url, {}))
        schema_id = client.register("bench-value", schema_text)
        framed = [header(schema_id) + b for b in bare]
        # kafka_direct's decoder alone, in this process, on Arrow batches of Spark's default size
        _, arrow_type = spark_type_of(schema_text, "jsonFormatSchema")
        decoder = AvroDecoder(
            schema_text, arrow_type, registry=parse_registry(registry.url, {}), reader_id=schema_id
        )
        batch = pa.array(framed, pa.binary())

        spark = local_spark(
            "bench-schema-registry",
            cores=args.partitions,
            conf={
                "spark.jars.packages": f"org.apache.spark:spark-avro_2.13:{_spark_avro_version()}"
            },
        )
        try:
            frame = (
                spark.createDataFrame([(b,) for b in framed], "value binary")
                .repartition(args.partitions)
                .cache()
            )
            assert frame.count() == args.records
            ours = frame.select(
                from_avro("value", subject="bench-value", schemaRegistryAddress=registry.url).alias(
                    "e"
                )
            )
            stripped = F.expr("substring(value, 6, length(value) - 5)")
            theirs = frame.select(spark_from_avro(stripped, schema_text).alias("e"))
            # The floor of any column function: an Arrow UDF that returns its binary input.
            identity = frame.select(
                _arrow_udf(lambda values: values, BinaryType(), "identity")("value").alias("e")
            )

            for name, query in (("kafka_direct", ours), ("spark_avro", theirs)):
                check = query.agg(F.count("e"), F.sum("e.device.version")).first()
                if tuple(check) != (args.records, expected_sum):
                    print(f"FAILED check: {name} decoded {tuple(check)}", file=sys.stderr)
                    return 1
            writes, encoder_status = _write_queries(
                spark, theirs, schema_text, registry.url, args.records, to_avro, spark_to_avro
            )
            if not writes:
                return 1
            encoder = AvroEncoder(schema_text, schema_id)
            structs = pa.array(records, arrow_type)  # what to_avro's UDF gets, in this process
            jvm = spark.sparkContext._gateway.proc.pid
            for _ in range(args.rounds):
                for name, query in (
                    ("kafka_direct", ours),
                    ("spark_avro", theirs),
                    ("identity_udf", identity),
                    *writes,
                ):
                    cpu = _tree_cpu_s(jvm)
                    seconds = _time(lambda q=query: q.write.format("noop").mode("overwrite").save())
                    results[name].append(args.records / seconds)
                    used = _tree_cpu_s(jvm) - cpu
                    if used > 0:  # else a worker exited unreaped in between: no figure
                        per_cpu_s[name].append(args.records / used)

                def loop() -> None:
                    read = fastavro.schemaless_reader
                    for blob in framed:
                        read(io.BytesIO(blob[5:]), parsed, None)

                results["fastavro"].append(args.records / _time(loop))

                def native() -> None:
                    for start in range(0, len(framed), 10_000):
                        decoder.decode(batch.slice(start, 10_000))

                results["c_decoder"].append(args.records / _time(native))

                def encode(python: bool) -> None:
                    prefix = header(schema_id)
                    for start in range(0, len(structs), 10_000):
                        part = structs.slice(start, 10_000)
                        encoder._encode_python(part, prefix) if python else encoder.encode(part)

                results["c_encoder"].append(args.records / _time(lambda: encode(False)))
                results["fastavro_encoder"].append(args.records / _time(lambda: encode(True)))
        finally:
            spark.stop()

    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\n{args.records:,} records, {args.partitions} Spark cores, median of {args.rounds}")
    print(f"kafka_direct's decoder: {avro_native.status()}")
    print(f"kafka_direct's encoder: {encoder_status} (in Spark's Python workers)")
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {os.getloadavg()}")
    print(f"{'decoder / encoder':<42}{'records/s':>14}{'vs Spark':>10}")
    labels = {
        "kafka_direct": "kafka_direct from_avro (wire format)",
        "spark_avro": "Spark from_avro (header stripped)",
        "fastavro": "fastavro loop, 1 core, no Spark",
        "c_decoder": "kafka_direct's decoder, 1 core, no Spark",
        "identity_udf": "Arrow UDF returning its input (floor)",
        "write_kafka_direct": "kafka_direct to_avro (wire format)",
        "write_fastavro_udf": "kafka_direct to_avro, NATIVE_AVRO=0",
        "write_spark_avro": "Spark to_avro (bare)",
        "write_floor_udf": "Arrow UDF, struct in, empty out (floor)",
        "c_encoder": "kafka_direct's encoder, 1 core, no Spark",
        "fastavro_encoder": "its fastavro path, 1 core, no Spark",
    }
    for name, value in median.items():
        spark_row = "write_spark_avro" if name in _WRITE_ROWS else "spark_avro"
        print(f"{labels[name]:<42}{value:>14,.0f}{value / median[spark_row]:>9.2f}x")
    cpu_median = {
        name: statistics.median(values) if values else float("nan")
        for name, values in per_cpu_s.items()
    }
    print(
        f"\n{'per CPU second (Spark JVM + its Python workers)':<48}{'records':>10}{'vs Spark':>10}"
    )
    for name, value in cpu_median.items():
        ratio = value / cpu_median["write_spark_avro" if name in _WRITE_ROWS else "spark_avro"]
        print(f"{labels[name]:<48}{value:>10,.0f}{ratio:>9.2f}x")
    if args.json:
        with open(args.json, "w") as figures:
            json.dump(
                {
                    "records": args.records,
                    "rounds": results,
                    "median": median,
                    "records_per_cpu_s": per_cpu_s,
                    "decoder": avro_native.status(),
                    "encoder": encoder_status,
                    "load_before": load_before,
                    "load_after": os.getloadavg(),
                },
                figures,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
