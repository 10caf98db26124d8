"""``kafka-direct consume``: look at what the sink wrote, as kafka-console-consumer shows it.
Formatting without a broker; the command against the real broker, on records written by the sink.
"""

from __future__ import annotations

import subprocess
import sys

from kafka_direct.cli import main
from kafka_direct.cli.consume import Line, format_record


def test_a_record_is_formatted_as_kafka_console_consumer_prints_it() -> None:
    line = Line(key=True, headers=True, offset=True, timestamp=True)
    shown = format_record(
        line,
        value=b"v\n2",
        key=None,
        headers=[("h", b"1"), ("bin", b"\xff"), ("n", None)],
        partition=2,
        offset=7,
        timestamp_ms=1700000000000,
    )
    assert (
        shown
        == "CreateTime:1700000000000\tPartition:2\tOffset:7\th:1,bin:\\xff,n:null\tnull\tv\\n2"
    )
    assert format_record(Line(), value=None) == "null"
    assert format_record(Line(headers=True, separator=" | "), value=b"x") == "NO_HEADERS | x"


def test_consume_prints_what_the_sink_wrote(spark, kafka_bootstrap, make_topic, capsys) -> None:
    topic = make_topic()
    df = spark.createDataFrame(
        [("k1", "one", [("h", b"a")]), (None, "two", None)],
        "key string, value string, headers array<struct<key:string,value:binary>>",
    )
    (
        df.coalesce(1)
        .write.format("kafka_direct")
        .mode("append")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("topic", topic)
        .save()
    )
    argv = ["consume", topic, "--bootstrap-servers", kafka_bootstrap, "--from-beginning"]
    assert main([*argv, "--max", "2", "--print-key", "--print-headers", "--timeout", "20"]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == sorted(["h:a\tk1\tone", "NO_HEADERS\tnull\ttwo"])
    assert "Processed a total of 2 messages" in err
    # --timeout ends a read that gets nothing more; the installed command does the same.
    done = subprocess.run(
        [sys.executable, "-m", "kafka_direct.cli", *argv, "--timeout", "1", "--print-offset"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "Partition:0\tOffset:0\tone",
        "Partition:0\tOffset:1\ttwo",
    ]


def test_consume_a_missing_topic_is_one_line_and_status_2(kafka_bootstrap, capsys) -> None:
    argv = ["consume", "no-such-topic-x", "--bootstrap-servers", kafka_bootstrap, "--max", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kafka-direct: TopicNotFoundError: Topic 'no-such-topic-x' was not found" in err
