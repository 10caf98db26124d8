"""Batch reads (`spark.read.format("kafka_direct")`) against the real broker: exact output."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from tests.integration.kafka_helpers import Record, produce_known


def rows_as_records(df: Any) -> list[Record]:
    out = []
    for r in df.collect():
        ts = r["timestamp"].replace(tzinfo=dt.timezone.utc)
        headers = (
            tuple((h["key"], h["value"]) for h in r["headers"] or ()) if "headers" in r else ()
        )
        out.append(
            Record(
                r["topic"],
                r["partition"],
                r["offset"],
                r["key"],
                r["value"],
                int(ts.timestamp() * 1000),
                headers,
            )
        )
    return sorted(out, key=lambda x: (x.topic, x.partition, x.offset))


@pytest.mark.tansu_smoke
def test_batch_read_returns_every_record_exactly_once_with_all_fields(
    make_topic, reader, kafka_bootstrap
):
    topic = make_topic(partitions=3)
    produced = produce_known(kafka_bootstrap, topic, per_partition=50, partitions=3, headers=True)

    df = reader(subscribe=topic, includeHeaders="true").load()
    got = rows_as_records(df)

    assert got == produced  # keys (incl. null), values, offsets, partitions, timestamps, headers
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    assert {r["timestampType"] for r in df.select("timestampType").collect()} == {0}


def test_without_include_headers_there_is_no_headers_column(make_topic, reader, kafka_bootstrap):
    topic = make_topic()
    produce_known(kafka_bootstrap, topic, per_partition=5, headers=True)
    df = reader(subscribe=topic).load()
    assert "headers" not in df.columns
    assert df.count() == 5


def test_offsets_json_bounds_are_exact_and_exclusive(make_topic, reader, kafka_bootstrap):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=20, partitions=2)
    df = reader(
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 12, "1": -1}}),
    ).load()
    expected = [
        r for r in produced if (r.partition == 0 and 5 <= r.offset < 12) or r.partition == 1
    ]
    assert rows_as_records(df) == expected


@pytest.mark.parametrize(
    "splitting",
    [{"minPartitions": "7"}, {"maxRecordsPerPartition": "9"}],
    ids=["minPartitions", "maxRecordsPerPartition"],
)
def test_split_ranges_still_read_every_record_once(make_topic, reader, kafka_bootstrap, splitting):
    topic = make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, topic, per_partition=40, partitions=2)
    df = reader(subscribe=topic, **splitting).load()
    assert df.rdd.getNumPartitions() >= 5
    assert rows_as_records(df) == produced


def test_assign_and_subscribe_pattern_choose_partitions(make_topic, reader, kafka_bootstrap):
    a = make_topic(partitions=2, prefix="pat")
    b = make_topic(partitions=1, prefix="pat")
    other = make_topic(prefix="other")
    pa = produce_known(kafka_bootstrap, a, per_partition=4, partitions=2)
    pb = produce_known(kafka_bootstrap, b, per_partition=3)
    produce_known(kafka_bootstrap, other, per_partition=3)

    assigned = rows_as_records(reader(assign=json.dumps({a: [1]})).load())
    assert assigned == [r for r in pa if r.partition == 1]

    prefix = a.split("-")[0]
    pattern = rows_as_records(reader(subscribePattern=f"{prefix}-.*").load())
    got_topics = {r.topic for r in pattern}
    assert {a, b} <= got_topics and other not in got_topics
    assert [r for r in pattern if r.topic in (a, b)] == sorted(
        pa + pb, key=lambda x: (x.topic, x.partition, x.offset)
    )


def test_empty_topic_reads_nothing(make_topic, reader):
    assert reader(subscribe=make_topic()).load().count() == 0
