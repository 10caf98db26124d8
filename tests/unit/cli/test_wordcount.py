"""The word count's checks (kafka_direct.cli.wordcount), without Spark or a broker: a word counts
as produced only once its record is delivered, what was not delivered is named, the producer
thread's error reaches the main thread, and a wait that times out says how far it got. The job
itself runs in tests/integration/test_main_job.py."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kafka_direct.cli import main
from kafka_direct.cli import wordcount as cli_wordcount
from kafka_direct.cli.wordcount import (
    WordCountResult,
    _produce,
    _ProducerThread,
    _wait_until_counted,
)
from kafka_direct.errors import DeliveryError
from kafka_direct.testing import demo


class FakeProducer:
    """Deliveries happen in poll/flush, as in librdkafka; ``outcome(i)`` decides record i's
    (None: delivered). ``never_deliver`` keeps every record waiting: flush returns them."""

    def __init__(
        self,
        outcome: Callable[[int], KafkaError | None] = lambda i: None,
        *,
        never_deliver: bool = False,
    ) -> None:
        self.outcome = outcome
        self.never_deliver = never_deliver
        self.queue: list[tuple[int, Callable[[Any, Any], None]]] = []
        self.records: list[tuple[bytes, KafkaError | None]] = []

    def produce(
        self, topic: str, value: bytes, on_delivery: Callable[[Any, Any], None], **where: Any
    ) -> None:
        index = len(self.records)
        self.records.append((value, self.outcome(index)))
        self.queue.append((index, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        if self.never_deliver:
            return 0
        served, self.queue = self.queue, []
        for index, callback in served:
            callback(self.records[index][1], SimpleNamespace(partition=lambda: 0))
        return len(served)

    def flush(self, timeout: float = -1) -> int:
        self.poll()
        return len(self.queue)


def _run(fake: FakeProducer, *, lone_last_record: bool = False) -> Counter[str]:
    sent: Counter[str] = Counter()
    _produce("b:9092", "t", 0.25, 40, 2, sent, lone_last_record, producer_factory=lambda c: fake)
    return sent


def _words(records: list[tuple[bytes, KafkaError | None]], delivered: bool) -> Counter[str]:
    return Counter(
        word
        for value, err in records
        if (err is None) == delivered
        for word in value.decode().split()
    )


def test_every_word_delivered_is_counted_and_lone_records_count_no_word() -> None:
    fake = FakeProducer()
    sent = _run(fake, lone_last_record=True)
    assert sum(sent.values()) > 0
    assert sent == _words(fake.records, delivered=True)
    assert [value for value, _ in fake.records[-2:]] == [b"", b""]  # one per partition


def test_a_word_counts_only_once_its_record_is_delivered_and_failures_are_named() -> None:
    # Issue: words were counted when sent, so a record that failed looked like a lost count.
    failed = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    fake = FakeProducer(lambda i: failed if i % 3 == 0 else None)
    sent: Counter[str] = Counter()
    with pytest.raises(DeliveryError) as info:
        _produce("b:9092", "t", 0.25, 40, 2, sent, False, producer_factory=lambda c: fake)
    assert sent == _words(fake.records, delivered=True)
    undelivered = sum(1 for _, err in fake.records if err is not None)
    assert undelivered > 0
    message = str(info.value)
    assert message.startswith(
        f"The word count's producer did not deliver {undelivered} of {len(fake.records)} "
        "records to topic 't': "
    )
    assert f"({failed.name()}): {undelivered} records" in message
    assert info.value.code == failed.name() and info.value.topic == "t"


def test_records_still_without_a_delivery_report_after_the_flush_are_named() -> None:
    # Issue: what flush(30) returned was ignored.
    fake = FakeProducer(never_deliver=True)
    sent: Counter[str] = Counter()
    with pytest.raises(DeliveryError, match=r"had no delivery report within 30 s") as info:
        _produce("b:9092", "t", 0.25, 40, 2, sent, False, producer_factory=lambda c: fake)
    assert sent == Counter()
    assert f"did not deliver {len(fake.records)} of {len(fake.records)} records" in str(info.value)


class _Query:
    def exception(self) -> BaseException | None:
        return None


def test_what_the_producer_thread_raised_is_raised_in_the_main_thread_at_once() -> None:
    # Issue: a producer thread that raised left the job waiting 140 s, then MISMATCH, no cause.
    def produce() -> None:
        raise BufferError("Local: Queue full")

    thread = _ProducerThread(produce)
    thread.start()
    began = time.monotonic()
    with pytest.raises(BufferError, match="Queue full"):
        _wait_until_counted(_Query(), WordCountResult(), thread, timeout_s=10)
    assert time.monotonic() - began < 5


def test_a_wait_that_times_out_is_not_exact_and_says_how_far_it_got() -> None:
    result = WordCountResult(produced=Counter(a=2, b=1), counted=Counter(a=1), batches=3)
    thread = _ProducerThread(lambda: None)
    thread.start()
    thread.join()
    assert _wait_until_counted(_Query(), result, thread, timeout_s=0.2) is False


@contextlib.contextmanager
def _given(bootstrap: str | None, broker: str) -> Iterator[str]:
    yield bootstrap or "embedded:9092"


@pytest.mark.parametrize(
    ("gave_up", "line"),
    [
        (
            "gave up waiting after 140 s: 1 of the 3 words delivered were counted, in 3 "
            "micro-batches, and the producer had not finished",
            "MISMATCH: missing {'a': 1, 'b': 1}, extra {}; gave up waiting after 140 s: 1 of the "
            "3 words delivered were counted, in 3 micro-batches, and the producer had not "
            "finished\n",
        ),
        (None, "MISMATCH: missing {'a': 1, 'b': 1}, extra {}\n"),
    ],
)
def test_the_mismatch_line_says_why_the_wait_ended(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    gave_up: str | None,
    line: str,
) -> None:
    # Issue: a wait that timed out returned silently; MISMATCH then gave no cause.
    result = WordCountResult(produced=Counter(a=2, b=1), counted=Counter(a=1), batches=3)
    result.gave_up = gave_up
    monkeypatch.setattr(demo, "bootstrap_or_embedded", _given)
    monkeypatch.setattr(cli_wordcount, "run_wordcount", lambda *a, **kw: result)
    assert main(["wordcount", "--bootstrap-servers", "b:9092"]) == 1
    assert capsys.readouterr().out == line


def test_gave_up_names_the_counts_and_a_producer_still_running() -> None:
    result = WordCountResult(produced=Counter(a=2, b=1), counted=Counter(a=1), batches=3)
    assert cli_wordcount._gave_up(result, False, 140.0) == (
        "gave up waiting after 140 s: 1 of the 3 words delivered were counted, in 3 "
        "micro-batches, and the producer had not finished"
    )
    assert cli_wordcount._gave_up(result, True, 24.5).endswith("in 3 micro-batches")
    assert not result.exact
    result.counted = Counter(result.produced)
    assert result.exact
    result.gave_up = "gave up"
    assert not result.exact


def test_records_not_delivered_end_the_job_with_exit_1_and_the_cause(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def undelivered(*args: Any, **kw: Any) -> WordCountResult:
        raise DeliveryError("The word count's producer did not deliver 2 of 9 records", topic="t",
                            partition=None)  # fmt: skip

    monkeypatch.setattr(demo, "bootstrap_or_embedded", _given)
    monkeypatch.setattr(cli_wordcount, "run_wordcount", undelivered)
    assert main(["wordcount", "--bootstrap-servers", "b:9092"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "kafka-direct: The word count's producer did not deliver 2 of 9 records\n"
    )
    assert "MISMATCH" not in captured.out
