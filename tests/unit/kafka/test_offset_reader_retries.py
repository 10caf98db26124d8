"""How often, and how far apart, the driver's offset reader asks again
(kafka_direct.kafka.offset_reader): as Spark's ``KafkaOffsetReaderAdmin`` does. Its
``withRetries`` makes ``fetchOffset.numRetries`` attempts in all (default 3), sleeping
``fetchOffset.retryIntervalMs`` after a failure (default 1000 in its code; its documentation
says 10), and its latest-offset re-check (KAFKA-7703) asks at most as many times, as far apart.

The reader is built from the source's options, as the stream runner builds it, over a fake admin
client whose requests fail (or answer stale offsets) a given number of times; ``time.sleep`` is
recorded, not slept.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.config.source import parse_source_options
from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka import offset_reader as offset_reader_module
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.offsets import TopicPartition
from kafka_direct.source.common import make_reader

T0 = TopicPartition("t", 0)
LOG_END = 100


class FlakyAdmin:
    """Answers ListOffsets with ``LOG_END``, after ``failures`` requests that fail as a broker
    that does not answer (retriable), then ``stale`` answers of ``LOG_END - 10``."""

    def __init__(self, failures: int = 0, stale: int = 0) -> None:
        self.failures = failures
        self.stale = stale
        self.requests = 0

    def list_topics(self, timeout: float = -1) -> Any:
        return SimpleNamespace(topics={}, controller_id=1, brokers={1: None})

    def list_offsets(self, request: Any, **_: Any) -> dict[Any, Future[Any]]:
        self.requests += 1
        if self.failures > 0:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Broker transport failure"))
        offset = LOG_END
        if self.stale > 0:
            self.stale -= 1
            offset = LOG_END - 10
        out: dict[Any, Future[Any]] = {}
        for tp in request:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=offset))
            out[tp] = future
        return out

    def poll(self, timeout: float = 0) -> int:
        return 0


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    sleeps: list[float] = []
    monkeypatch.setattr(offset_reader_module.time, "sleep", sleeps.append)
    return sleeps


def reader_for(admin: FlakyAdmin, **options: str) -> AdminOffsetReader:
    """The reader the source builds from ``options`` (Spark's defaults unless given)."""
    opts = parse_source_options(
        {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", **options}, streaming=True
    )
    reader = make_reader(opts)
    reader._admin_factory = lambda kafka, events: admin
    return reader


@pytest.mark.parametrize(
    ("options", "failures", "requests", "sleeps"),
    [
        pytest.param({}, 0, 1, [], id="answered at once"),
        pytest.param({}, 2, 3, [1.0, 1.0], id="fails twice, then answers: 3 attempts, 1 s apart"),
        pytest.param({"fetchOffset.numRetries": "5"}, 4, 5, [1.0] * 4, id="numRetries=5"),
        pytest.param({"fetchOffset.retryIntervalMs": "250"}, 1, 2, [0.25], id="250 ms apart"),
    ],
)
def test_a_failing_request_is_made_num_retries_times_in_all(
    slept: list[float],
    options: dict[str, str],
    failures: int,
    requests: int,
    sleeps: list[float],
) -> None:
    admin = FlakyAdmin(failures=failures)
    assert reader_for(admin, **options).earliest([T0]) == {T0: LOG_END}
    assert (admin.requests, slept) == (requests, sleeps)


@pytest.mark.parametrize(
    ("options", "requests", "sleeps"),
    [
        # Spark throws after its last attempt; no sleep is owed after it.
        pytest.param({}, 3, [1.0, 1.0], id="3 attempts by default"),
        pytest.param({"fetchOffset.numRetries": "1"}, 1, [], id="numRetries=1: no retry"),
    ],
)
def test_a_request_that_keeps_failing_fails_after_num_retries_attempts(
    slept: list[float], options: dict[str, str], requests: int, sleeps: list[float]
) -> None:
    admin = FlakyAdmin(failures=100)
    with pytest.raises(KafkaClientError, match=rf"after {requests} attempt\(s\)") as info:
        reader_for(admin, **options).earliest([T0])
    assert info.value.retriable
    assert (admin.requests, slept) == (requests, sleeps)


@pytest.mark.parametrize(
    ("stale", "requests", "sleeps", "latest"),
    [
        pytest.param(0, 1, [], LOG_END, id="not behind"),
        pytest.param(2, 3, [1.0, 1.0], LOG_END, id="stale twice: the third answer"),
        # Spark believes its last answer; a stream then reports the offset going back.
        pytest.param(5, 3, [1.0, 1.0], LOG_END - 10, id="stale every time: 3 answers"),
    ],
)
def test_a_latest_offset_behind_a_known_one_is_asked_again_as_spark_does(
    slept: list[float], stale: int, requests: int, sleeps: list[float], latest: int
) -> None:
    """KAFKA-7703: a replica just made leader can answer a log end behind what was read."""
    admin = FlakyAdmin(stale=stale)
    assert reader_for(admin).latest([T0], known={T0: LOG_END}) == {T0: latest}
    assert (admin.requests, slept) == (requests, sleeps)
