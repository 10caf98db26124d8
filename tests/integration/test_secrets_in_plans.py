"""Secrets never reach ``explain()``, Spark's or our logs, or an error, on a real local Spark.

Each secret kafka.* option below is accepted by librdkafka (the connection is PLAINTEXT, so it
is never used), so the read plans and runs; the misspelt one is refused at ``load()``. Spark
redacts option values in plans by ``spark.redaction.regex`` (password, secret, token...), which
knows nothing of ``sasl.oauthbearer.config`` or ``ssl.key.pem``: the test checks them all.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.errors import PySparkException

SECRETS = {
    "kafka.sasl.password": "PW-9f3e1c",
    "kafka.ssl.key.password": "KEYPW-7a2b4d",
    "kafka.sasl.oauthbearer.config": "principal=alice scope=x extension_k=OAUTH-5c8e0f",
    "kafka.sasl.oauthbearer.client.secret": "CLIENT-3d6a9b",
}


def _explained(df: Any, mode: str | None) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain() if mode is None else df.explain(mode)
    return out.getvalue()


def test_no_secret_in_explain_logs_or_errors(
    spark: Any,
    kafka_bootstrap: str,
    make_topic: Any,
    worker_log: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    topic = make_topic(partitions=1)
    # Records stamped now: real Kafka's retention would delete old-stamped ones at once.
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    texts: list[str] = []
    # Every kafka_direct logger at DEBUG, everything else at INFO. (py4j's own DEBUG log echoes
    # each call to the JVM, option values included: the user's calls, outside the library.)
    with caplog.at_level(logging.INFO), caplog.at_level(logging.DEBUG, logger="kafka_direct"):
        reader = (
            spark.read.format("kafka_direct")
            .option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
        )
        for key, value in SECRETS.items():
            reader = reader.option(key, value)
        df = reader.load().where("offset >= 1")
        for mode in (None, "extended", "formatted", "cost", "codegen"):
            texts.append(_explained(df, mode))
        assert "offset" in texts[2]  # the plan was explained
        assert df.count() == 4  # and the query ran with the secrets in its config
        # A misspelt secret key is refused at load(), and its value is not in the error.
        with pytest.raises(PySparkException) as info:
            reader.option("kafka.sasl.pasword", "TYPO-1e4f7a").load()
        texts += [str(info.value), repr(info.value)]
    texts += [caplog.text, worker_log.read_text(errors="replace")]
    captured = capfd.readouterr()
    texts += [captured.out, captured.err]
    leaked = [
        (secret, i)
        for secret in [*SECRETS.values(), "TYPO-1e4f7a"]
        for i, text in enumerate(texts)
        if secret.split("=")[-1] in text
    ]
    assert leaked == []
    assert "kafka.sasl.pasword" in texts[-6]  # the error still names the option
