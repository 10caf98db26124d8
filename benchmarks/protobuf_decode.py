"""Records per second of from_protobuf's two decode paths on the same bytes, in one process:
the C decoder (``_protobuf_arrow``) and the Python path (a message object per record), each
decoding the same Arrow batches of Confluent-framed records of a 12-field Order (nested
message, repeated strings and messages, a map, an enum, a Timestamp, an optional field, bytes,
double, bool). By default without Spark or a registry: the writer schema is put in this
process's cache by id, as the registry client leaves it after its one fetch. With ``--spark``,
also end to end: ``from_protobuf`` in local Spark (2 cores) against a real registry (Apicurio,
started here) on the same records cached in Spark, the C path and the Python path
(``KAFKA_DIRECT_NATIVE_PROTOBUF=0`` in the workers' environment) alternating round by round.

    . scripts/setup.sh
    python benchmarks/protobuf_decode.py --records 100000 --batch 10000 --rounds 5
    python benchmarks/protobuf_decode.py --records 200000 --rounds 5 --spark
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

import pyarrow as pa
from google.protobuf import message_factory
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import _parse_datatype_json_value

from kafka_direct.schema_registry import protobuf_native, protobuf_schema
from kafka_direct.schema_registry.options import parse_registry
from kafka_direct.schema_registry.protobuf_codec import (
    ProtobufDecoder,
    file_descriptor,
    message_descriptor,
    message_indexes,
    to_spark_type,
)
from kafka_direct.schema_registry.wire import header
from kafka_direct.testing.samples import ORDER_PROTO as PROTO

URL = "http://speed.invalid"
SCHEMA_ID = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000, help="records per Arrow batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--spark", action="store_true", help="also from_protobuf in Spark")
    args = parser.parse_args()

    file = file_descriptor(PROTO)
    protobuf_schema._files_by_id[(URL, SCHEMA_ID)] = file
    order = message_descriptor(file, name="Order")
    cls = message_factory.GetMessageClass(order)
    line = message_factory.GetMessageClass(message_descriptor(file, name="Line"))
    prefix = header(SCHEMA_ID) + message_indexes([0])
    blobs = []
    for i in range(args.records):
        record = cls(
            id=i,
            customer=f"customer-{i % 1000}",
            tags=[f"t{j}" for j in range(i % 4)],
            counts={"a": i % 7, "b": 3} if i % 2 else {},
            kind=i % 2,
            first=line(sku=f"sku-{i % 100}", quantity=i % 10),
            lines=[line(sku="x", quantity=j) for j in range(i % 3)],
            blob=bytes([i % 256]) * 8,
            amount=i * 0.25,
            paid=i % 3 == 0,
        )
        record.at.FromDatetime(datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=i))
        if i % 2:
            record.note = "note"
        blobs.append(prefix + record.SerializeToString())
    batches = [
        pa.array(blobs[at : at + args.batch], pa.binary())
        for at in range(0, len(blobs), args.batch)
    ]
    spark_type = _parse_datatype_json_value(to_spark_type(order))
    decoder = ProtobufDecoder(
        to_arrow_type(spark_type, timezone="UTC"),
        parse_registry(URL, {}),
        reader_id=SCHEMA_ID,
        reader_message=order.full_name,
    )
    assert decoder._program() is not None, protobuf_native.status()

    # Same result both ways before timing anything (maps compared as dicts: the Python path
    # gives a map's entries in its container's order, the C path in the records').
    def plain(value: object) -> object:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return {k: plain(v) for k, v in value}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    assert plain(decoder.decode(batches[0]).to_pylist()) == plain(
        decoder._decode_python(batches[0]).to_pylist()
    )

    def rate(decode: Callable[[pa.Array], pa.Array]) -> float:
        start = time.perf_counter()
        for batch in batches:
            decode(batch)
        return float(args.records / (time.perf_counter() - start))

    c_rates: list[float] = []
    python_rates: list[float] = []
    for _ in range(args.rounds):
        c_rates.append(rate(decoder.decode))
        python_rates.append(rate(decoder._decode_python))
    figures = {
        "records": args.records,
        "batch": args.batch,
        "rounds": args.rounds,
        "c_records_per_s": statistics.median(c_rates),
        "python_records_per_s": statistics.median(python_rates),
    }
    figures["ratio"] = figures["c_records_per_s"] / figures["python_records_per_s"]
    sys.stdout.write(
        f"{args.records:,} records in batches of {args.batch:,}, median of {args.rounds} rounds:\n"
        f"  C decoder   {figures['c_records_per_s']:>12,.0f} records/s\n"
        f"  Python path {figures['python_records_per_s']:>12,.0f} records/s\n"
        f"  ratio       {figures['ratio']:>12.1f}x\n"
    )
    if args.spark:
        figures.update(_spark(blobs, args.rounds))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


def _spark(blobs: list[bytes], rounds: int) -> dict[str, float]:
    """from_protobuf in local Spark on the same records: one Spark per path, each in a process
    of its own (the workers' environment is fixed when Spark starts), one registry for both."""
    import subprocess
    import tempfile

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from kafka_direct.testing.schema_registry import SchemaRegistry

    out: dict[str, float] = {}
    with SchemaRegistry() as registry, tempfile.TemporaryDirectory() as scratch:
        client = SchemaRegistryClient({"url": registry.url, "timeout": 20})
        schema_id = client.register_schema("speed-value", Schema(PROTO, "PROTOBUF"))
        prefix = header(schema_id) + message_indexes([0])
        framed = [prefix + blob[len(header(SCHEMA_ID)) + 1 :] for blob in blobs]
        data = f"{scratch}/records.arrow"
        with pa.OSFile(data, "wb") as sink:
            table = pa.table({"value": pa.array(framed, pa.binary())})
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        for path in ("C", "Python"):
            env = {**os.environ, protobuf_native.DISABLE_ENV: "1" if path == "C" else "0"}
            result = subprocess.run(
                [sys.executable, __file__, "--spark-child", data, registry.url, str(rounds)],
                env=env,
                capture_output=True,
                text=True,
                timeout=3600,
                check=True,
            )
            out[f"spark_{path.lower()}_records_per_s"] = float(result.stdout.split()[-1])
    ratio = out["spark_c_records_per_s"] / out["spark_python_records_per_s"]
    sys.stdout.write(
        f"from_protobuf in local Spark (2 cores), median of {rounds} rounds:\n"
        f"  C decoder   {out['spark_c_records_per_s']:>12,.0f} records/s\n"
        f"  Python path {out['spark_python_records_per_s']:>12,.0f} records/s\n"
        f"  ratio       {ratio:>12.1f}x\n"
    )
    return out


def _spark_child(data: str, url: str, rounds: int) -> None:
    """One path's rounds (the environment says which); prints the median records/s last."""
    from pyspark.sql import functions as F

    from kafka_direct.functions import from_protobuf
    from kafka_direct.testing.local import local_spark

    with pa.memory_map(data) as source:
        framed = pa.ipc.open_file(source).read_all().column("value").to_pylist()
    spark = local_spark(
        "protobuf-speed", conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "10000"}
    )
    try:
        frame = spark.createDataFrame([(b,) for b in framed], "value binary").repartition(2)
        frame = frame.cache()
        frame.count()
        options = {"schema.registry.subject": "speed-value", "schema.registry.address": url}
        expected = (sum(range(len(framed))), len(framed), len(framed) // 2)
        rates = []
        for _ in range(rounds):
            # A new query each round: running one twice would reuse its shuffle's map output.
            decoded = frame.select(from_protobuf("value", "Order", options=options).alias("o"))
            total = decoded.select(F.sum("o.id"), F.count("o.customer"), F.count("o.counts"))
            start = time.perf_counter()
            row = total.collect()[0]
            rates.append(len(framed) / (time.perf_counter() - start))
            assert tuple(row) == expected, (tuple(row), expected)
    finally:
        spark.stop()
    sys.stdout.write(f"{protobuf_native.status()}\n{statistics.median(rates)}\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--spark-child"]:
        _spark_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
