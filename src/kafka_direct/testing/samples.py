"""Sample data: the word list of the demo, the CLI's producer and the examples, and the Protobuf
schema of the Order records the Protobuf tests and benchmark write. Plain library."""

from __future__ import annotations

__all__ = ["ORDER_PROTO", "WORDS"]

WORDS = [
    "kafka",
    "spark",
    "stream",
    "direct",
    "offset",
    "partition",
    "broker",
    "topic",
    "batch",
    "record",
    "driver",
    "executor",
    "commit",
    "consumer",
    "producer",
]

#: A Protobuf file with one message of every kind spark-protobuf maps (nested and repeated
#: messages, a map, an enum, a Timestamp, optional and repeated scalars).
ORDER_PROTO = """syntax = "proto3";
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
