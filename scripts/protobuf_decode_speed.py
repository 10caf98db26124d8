"""Records per second of from_protobuf's two decode paths on the same bytes, in one process:
the C decoder (``_protobuf_arrow``) and the Python path (a message object per record), each
decoding the same Arrow batches of Confluent-framed records of a 12-field Order (nested
message, repeated strings and messages, a map, an enum, a Timestamp, an optional field, bytes,
double, bool). No Spark and no registry: the writer schema is put in the worker's cache by id,
as the registry client leaves it after its one fetch.

    . scripts/setup.sh
    python scripts/protobuf_decode_speed.py --records 100000 --batch 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

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

PROTO = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
message Order {
  enum Kind { NEW = 0; OLD = 1; }
  int64 id = 1;
  string customer = 2;
  repeated string tags = 3;
  map<string, int32> counts = 4;
  Kind kind = 5;
  Line first = 6;
  repeated Line lines = 7;
  google.protobuf.Timestamp at = 8;
  optional string note = 9;
  bytes blob = 10;
  double amount = 11;
  bool paid = 12;
}
message Line { string sku = 1; int32 quantity = 2; }
"""
URL = "http://speed.invalid"
SCHEMA_ID = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000, help="records per Arrow batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
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

    def rate(decode: object) -> float:
        start = time.perf_counter()
        for batch in batches:
            decode(batch)  # type: ignore[operator]
        return args.records / (time.perf_counter() - start)

    c_rates, python_rates = [], []
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
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
