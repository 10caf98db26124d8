"""The runnable examples, against the test broker and the shared local Spark."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from confluent_kafka import Producer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_keyed_producer_keeps_every_key_in_one_partition(make_topic, kafka_bootstrap, capsys):
    topic = make_topic(partitions=3)
    keyed = load("keyed_producer")
    placements = keyed.produce_keyed(kafka_bootstrap, topic, events=40, items=7)
    assert sorted(placements) == [f"item{i}" for i in range(7)]
    assert all(len(parts) == 1 for parts in placements.values())
    assert "partition" in capsys.readouterr().out


def test_windowed_counts_slide_every_two_seconds_over_ten_minutes(
    make_topic, spark, kafka_bootstrap
):
    topic = make_topic()
    base = 1_700_000_000_000  # ms; a multiple of 2 s
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, line in enumerate(["a b", "a", "b b"]):
        producer.produce(topic, value=line.encode(), partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record: the embedded broker's log end stays exact
    lines = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .load()
    )
    counts = load("windowed_word_count").windowed_counts(lines)
    start = dt.datetime.fromtimestamp(base / 1000, dt.timezone.utc).replace(tzinfo=None)
    # The window that starts exactly at the first record holds all three records.
    rows = {r["word"]: r["count"] for r in counts.where(counts.window.start == start).collect()}
    assert rows == {"a": 2, "b": 3}
    # A record belongs to 10 min / 2 s = 300 sliding windows. "a" (at t0 and t0+1 s) falls in the
    # same 300 windows both times; "b" (t0, t0+2 s) reaches one more window that starts at t0+2.
    per_word = {
        r["word"]: r["n"]
        for r in counts.groupBy("word").count().withColumnRenamed("count", "n").collect()
    }
    assert per_word == {"a": 300, "b": 301}


def test_direct_word_count_counts_a_batch_like_reduce_by_key(make_topic, spark, kafka_bootstrap):
    topic = make_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for line in ["kafka spark", "spark", "direct  stream spark"]:
        producer.produce(topic, value=line.encode(), partition=0)
        producer.flush(10)  # one batch per record: the embedded broker's log end stays exact
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .load()
    )
    counts = load("direct_kafka_word_count").count_words(df)
    assert counts == {"kafka": 1, "spark": 3, "direct": 1, "stream": 1}


def test_exactly_once_example_adds_counts_inside_the_store_transaction(
    make_topic, spark, kafka_bootstrap
):
    from kafka_direct.offsets import OffsetRange
    from kafka_direct.stores import SqlOffsetStore
    from tests.integration.db_helpers import postgres_dsn

    topic = make_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=b"once once more", partition=0)
    producer.flush(10)
    df = (
        spark.read.format("kafka_direct")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .load()
    )
    example = load("exactly_once_postgres")
    store = SqlOffsetStore.postgres(postgres_dsn())
    try:
        with store.session() as session:
            session.cursor.execute("DROP TABLE IF EXISTS word_counts")
            session.cursor.execute(
                "CREATE TABLE word_counts (word TEXT PRIMARY KEY, n BIGINT NOT NULL)"
            )
        with store.transaction(f"ex-{topic}", [OffsetRange(topic, 0, 0, 1)]) as cur:
            example.add_counts(df, 0, cur)
        with store.session(write=False) as session:
            session.cursor.execute("SELECT word, n FROM word_counts ORDER BY word")
            assert session.cursor.fetchall() == [("more", 1), ("once", 2)]
        assert store.load(f"ex-{topic}") != {}
    finally:
        store.close()


def test_kafka_to_kafka_enriches_every_record_exactly_once(
    make_topic, spark, kafka_bootstrap, tmp_path
):
    from tests.integration.kafka_helpers import produce_known
    from tests.integration.test_sink_batch import read_topic

    source, target = make_topic(partitions=2), make_topic(partitions=2)
    produced = produce_known(kafka_bootstrap, source, per_partition=15, partitions=2)
    example = load("kafka_to_kafka")
    query = example.start_pipeline(
        spark, kafka_bootstrap, source, target, str(tmp_path / "ck"), availableNow=True
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    got = read_topic(kafka_bootstrap, target, len(produced))
    assert sorted(h[0][1] for _, _, _, h in got) == sorted(
        f"{r.topic}-{r.partition}@{r.offset}".encode() for r in produced
    )  # every record once, its source in a header
    first = next(v for _, _, v, h in got if h[0][1] == f"{source}-0@0".encode())
    assert json.loads(first) | {"read_at": None} == {
        "line": f"{source}|p0|0",
        "words": 1,
        "shout": f"{source}|P0|0".upper(),
        "read_at": None,
    }
    # keyed by the first word: the whole line here, so every key is the source value
    assert {k for _, k, _, _ in got} == {r.value for r in produced}
