"""The kafka-direct command line without a broker: record placement, delivery accounting, the
produce flow against a fake producer, lag --watch rendering, reset validation, main()'s exits.

The same commands against the real broker: tests/integration/test_cli.py.
"""

from __future__ import annotations

import io
import logging
import random
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.cli import build_parser, main
from kafka_direct.cli import lag as cli_lag
from kafka_direct.cli import produce as cli_tools
from kafka_direct.cli.common import CLIENT_LOG
from kafka_direct.cli.lag import CLEAR_SCREEN, _lag
from kafka_direct.cli.offsets import resolve_reset
from kafka_direct.cli.produce import Deliveries, _payloads, _produce, place
from kafka_direct.errors import ConfigurationError, KafkaClientError
from kafka_direct.kafka.lag import LagRow
from kafka_direct.kafka.logs import LIBRDKAFKA_LOG
from kafka_direct.offsets import TopicPartition
from kafka_direct.producer.partitioning import murmur2, murmur2_partition
from tests.unit.fake_reader import FakeCluster

# -- placement -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "signed"),
    [
        # Kafka's own vectors (clients UtilsTest.testMurmur2), as Java's signed ints.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafkas_java_implementation(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed & 0xFFFFFFFF


def test_murmur2_partition_is_javas_to_positive_modulo() -> None:
    # toPositive(-973932308) = -973932308 & 0x7fffffff = 1173551340
    assert murmur2_partition(b"21", 7) == 1173551340 % 7
    assert [murmur2_partition(f"item{k}".encode(), 3) for k in range(10)] == [
        1,
        1,
        0,
        2,
        0,
        2,
        0,
        1,
        2,
        0,
    ]


def test_place_is_round_robin_without_a_key_by_hash_with_one_else_left_to_librdkafka() -> None:
    assert [place(i, None, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [place(i, b"item1", 3) for i in range(3)] == [1, 1, 1]
    assert place(5, None, None) == -1
    assert place(5, b"item1", None) == -1


def test_deliveries_count_per_partition_and_name_each_distinct_cause() -> None:
    tally = Deliveries()
    ok = SimpleNamespace(partition=lambda: 1)
    tally(None, ok)
    tally(None, ok)
    for _ in range(3):
        tally(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), ok)
    tally.fail(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert tally.delivered == 2
    assert dict(tally.per_partition) == {1: 2}
    assert tally.failed == 4
    assert tally.causes() == (
        "Broker: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART): 3 records; "
        "Local: Message timed out (_MSG_TIMED_OUT): 1 record"
    )


# -- produce against a fake producer -------------------------------------------------------------


def _topic(partitions: int, error: KafkaError | None = None) -> Any:
    return SimpleNamespace(error=error, partitions={p: None for p in range(partitions)})


class FakeProducer:
    """What ``produce`` uses of confluent-kafka's Producer. Deliveries happen in poll/flush, as
    in librdkafka; ``outcome(i)`` decides record i's (None: delivered); ``log`` is the order of
    produce/flush calls."""

    def __init__(
        self,
        config: dict[str, Any],
        topics: dict[str, Any],
        *,
        outcome: Callable[[int], KafkaError | None] = lambda i: None,
        metadata_error: KafkaError | None = None,
        client_event: KafkaError | None = None,
        interrupt_at: int | None = None,
        never_deliver: bool = False,
        topic_answers: list[Any] | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.outcome = outcome
        self.metadata_error = metadata_error
        self.client_event = client_event
        self.interrupt_at = interrupt_at
        self.never_deliver = never_deliver
        self.topic_answers = topic_answers or []
        self.queue: list[tuple[int, int, Callable[[Any, Any], None]]] = []
        self.log: list[tuple[str, Any]] = []
        self.metadata_requests: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.metadata_requests.append(topic)
        if self.metadata_error is not None:
            raise KafkaException(self.metadata_error)
        if topic is not None and self.topic_answers:
            return SimpleNamespace(topics={topic: self.topic_answers.pop(0)})
        wanted = self.topics if topic is None else {topic: self.topics.get(topic)}
        return SimpleNamespace(topics={k: v for k, v in wanted.items() if v is not None})

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int,
        on_delivery: Callable[[Any, Any], None],
    ) -> None:
        index = sum(1 for what, _ in self.log if what == "produce")
        if index == self.interrupt_at:
            raise KeyboardInterrupt
        self.log.append(("produce", (partition, key, value)))
        self.queue.append((index, partition, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        if self.client_event is not None:
            self.config["error_cb"](self.client_event)
        if self.never_deliver:
            return 0
        served, self.queue = self.queue, []
        for index, partition, callback in served:
            callback(self.outcome(index), SimpleNamespace(partition=lambda p=partition: p))
        return len(served)

    def flush(self, timeout: float = -1) -> int:
        self.log.append(("flush", None))
        self.poll()
        return len(self.queue)

    def __len__(self) -> int:
        return len(self.queue)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _produce_args(*extra: str) -> Any:
    return build_parser().parse_args(
        ["produce", "--bootstrap-servers", "fake:9092", "--topic", "t", *extra]
    )


def _run_produce(
    fake_of: Callable[[dict[str, Any]], FakeProducer], *extra: str, tty: bool = False
) -> Any:
    out, err = io.StringIO(), (_Tty() if tty else io.StringIO())
    made: list[FakeProducer] = []

    def factory(config: dict[str, Any]) -> FakeProducer:
        made.append(fake_of(config))
        return made[0]

    code = _produce(_produce_args(*extra), out, err, producer_factory=factory)
    return SimpleNamespace(code=code, out=out.getvalue(), err=err.getvalue(), fake=made[0])


def test_produce_sends_every_record_in_order_round_robin_then_flushes_once() -> None:
    # No partition ends with a record held back and sent alone: that was a workaround for the
    # embedded Tansu broker's watermark, which the library and its CLI no longer carry.
    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(3)}),
        *("--records", "10", "--kind", "bytes", "--size", "4"),
        tty=True,
    )
    make = _payloads("bytes", 4, random.Random(42))
    index = {make(i)[1]: i for i in range(10)}
    order = ["flush" if what == "flush" else (index[rec[2]], rec[0]) for what, rec in run.fake.log]
    # Round-robin: p0 gets 0 3 6 9, p1 1 4 7, p2 2 5 8.
    assert order == [(i, i % 3) for i in range(10)] + ["flush"]
    assert run.code == 0
    assert run.out.startswith("Delivered 10 records to topic 't' in ")
    assert run.out.endswith(" s (per partition: 0=4 1=3 2=3)\n")
    assert "10/10" in run.err and "records/s" in run.err  # tqdm's bar, on a terminal


def test_produce_places_keyed_records_by_murmur2_so_a_key_stays_in_one_partition() -> None:
    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(3)}), "--records", "30", "--kind", "keyed"
    )
    placed = {(rec[1], rec[0]) for what, rec in run.fake.log if what == "produce"}
    assert placed == {
        (f"item{k}".encode(), murmur2_partition(f"item{k}".encode(), 3)) for k in range(10)
    }
    assert run.code == 0


def test_produce_configures_a_bounded_java_like_producer_that_logs_through_logging() -> None:
    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(1)}), "--records", "1", "--timeout", "7.5"
    )
    config = run.fake.config
    assert config["message.timeout.ms"] == "7500"
    assert config["partitioner"] == "murmur2_random"
    assert config["enable.idempotence"] == "true"
    assert config["logger"] is LIBRDKAFKA_LOG  # every client's: kafka_direct.kafka.logs
    assert callable(config["error_cb"])


def test_produce_checks_every_delivery_report_and_names_the_failed_count_causes_and_topic() -> None:
    # Regression: a bad topic printed "10/10 records" and exited 0.
    def outcome(i: int) -> KafkaError | None:
        if i % 4 == 0:
            return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        return KafkaError(KafkaError._MSG_TIMED_OUT) if i == 5 else None

    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(2)}, outcome=outcome), "--records", "10", tty=True
    )
    assert run.code == 1
    assert run.out == ""
    assert run.err.endswith(
        "kafka-direct: 4 of 10 records were not delivered to topic 't': "
        "Broker: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART): 3 records; "
        "Local: Message timed out (_MSG_TIMED_OUT): 1 record\n"
    )
    # The progress bar counts delivered records, not queued ones.
    assert "6/10" in run.err and "4 failed" in run.err
    assert "10/10" not in run.err


def test_produce_counts_records_refused_before_queueing_as_failed() -> None:
    class Refusing(FakeProducer):
        def produce(self, *args: Any, **kwargs: Any) -> None:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))

    run = _run_produce(lambda c: Refusing(c, {"t": _topic(1)}), "--records", "3")
    assert run.code == 1
    assert run.err.endswith(
        "kafka-direct: 3 of 3 records were not delivered to topic 't': "
        "Broker: Message size too large (MSG_SIZE_TOO_LARGE): 3 records\n"
    )


def test_produce_with_a_topic_whose_metadata_has_an_error_lets_librdkafka_place_and_says_why() -> (
    None
):
    run = _run_produce(
        lambda c: FakeProducer(
            c,
            {"t": _topic(0, KafkaError(KafkaError.TOPIC_EXCEPTION))},
            outcome=lambda i: KafkaError(KafkaError.TOPIC_EXCEPTION),
        ),
        "--records",
        "5",
    )
    assert {rec[0] for what, rec in run.fake.log if what == "produce"} == {-1}
    assert run.code == 1
    assert run.err.endswith(
        "kafka-direct: 5 of 5 records were not delivered to topic 't': "
        "Broker: Invalid topic (TOPIC_EXCEPTION): 5 records; "
        "metadata for the topic says: Broker: Invalid topic (TOPIC_EXCEPTION)\n"
    )


def test_produce_asks_again_while_a_new_topic_has_no_leader_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_tools, "_METADATA_PAUSE_S", 0.0)
    answers = [_topic(0, KafkaError(KafkaError.LEADER_NOT_AVAILABLE)), _topic(2)]
    run = _run_produce(lambda c: FakeProducer(c, {}, topic_answers=answers), "--records", "4")
    # All topics first (no auto-creation), then the topic by name until it has a leader.
    assert run.fake.metadata_requests == [None, "t", "t"]
    assert [rec[0] for what, rec in run.fake.log if what == "produce"] == [0, 1, 0, 1]
    assert run.code == 0


def test_produce_fails_with_the_clients_cause_when_the_cluster_cannot_be_reached() -> None:
    refused = KafkaError(
        KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect failed: Connection refused"
    )
    with pytest.raises(KafkaClientError) as info:
        _run_produce(
            lambda c: FakeProducer(
                c,
                {},
                metadata_error=KafkaError(KafkaError._TRANSPORT),
                client_event=refused,
            ),
            *("--records", "5", "--timeout", "2"),
        )
    assert str(info.value) == (
        "Could not reach the Kafka cluster at 'fake:9092' within 2 s to produce to topic 't': "
        "127.0.0.1:1/bootstrap: Connect failed: Connection refused -> nothing accepts "
        "connections there: check the host and port in 'kafka.bootstrap.servers' and that the "
        "broker is running (_TRANSPORT). Check --bootstrap-servers, or raise --timeout."
    )


def test_produce_gives_up_on_records_without_a_delivery_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_tools, "_FLUSH_MARGIN_S", 0.0)
    began = time.monotonic()
    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(1)}, never_deliver=True),
        *("--records", "3", "--timeout", "0.2"),
    )
    assert time.monotonic() - began < 5
    assert run.code == 1
    assert run.err.endswith(
        "kafka-direct: 3 of 3 records were not delivered to topic 't': "
        "3 records had no delivery report within 0.2 s\n"
    )


def test_produce_interrupted_reports_what_was_delivered_and_exits_130() -> None:
    run = _run_produce(
        lambda c: FakeProducer(c, {"t": _topic(1)}, interrupt_at=4), "--records", "10"
    )
    assert run.code == 130
    assert run.err == "kafka-direct: interrupted; 4 of 10 records were delivered to topic 't'\n"
    assert "Traceback" not in run.err


# -- lag --watch -----------------------------------------------------------------------------------


def _lag_args(*extra: str) -> Any:
    return build_parser().parse_args(
        ["lag", "--bootstrap-servers", "fake:9092", "--group", "g", *extra]
    )


def _fake_lag(ends: list[int]) -> Callable[..., list[LagRow]]:
    def rows(kafka: Any, group: str, topics: Any, *, timeout_s: float) -> list[LagRow]:
        assert (kafka, group, timeout_s) == ({"bootstrap.servers": "fake:9092"}, "g", 4.0)
        return [LagRow("t", 0, 3, ends.pop(0))]

    return rows


TABLE_5 = (
    "GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG\n"
    "g      t      0          3               5               2\n"
    "total lag: 2\n"
)
TABLE_9 = TABLE_5.replace("5               2", "9               6").replace("lag: 2", "lag: 6")


def test_lag_watch_into_a_pipe_prints_each_table_under_its_timestamp_and_a_blank_line() -> None:
    out, sleeps = io.StringIO(), list[float]()
    stamps = iter(["2026-01-02T03:04:05+00:00", "2026-01-02T03:04:07+00:00"])
    code = _lag(
        _lag_args("--watch", "2", "--count", "2", "--timeout", "4"),
        out,
        clock=lambda: next(stamps),
        sleep=sleeps.append,
        lag_rows=_fake_lag([5, 9]),
    )
    assert code == 0
    assert sleeps == [2.0]
    assert out.getvalue() == (
        "2026-01-02T03:04:05+00:00  group 'g', every 2 s (Ctrl-C to stop)\n"
        + TABLE_5
        + "\n2026-01-02T03:04:07+00:00  group 'g', every 2 s (Ctrl-C to stop)\n"
        + TABLE_9
    )


def test_lag_watch_on_a_terminal_clears_and_redraws_in_place() -> None:
    out = _Tty()
    stamps = iter(["2026-01-02T03:04:05+00:00", "2026-01-02T03:04:06+00:00"])
    _lag(
        _lag_args("--watch", "0.5", "--count", "2", "--timeout", "4"),
        out,
        clock=lambda: next(stamps),
        sleep=lambda s: None,
        lag_rows=_fake_lag([5, 9]),
    )
    assert CLEAR_SCREEN == "\x1b[H\x1b[2J"
    assert out.getvalue() == (
        "\x1b[H\x1b[2J2026-01-02T03:04:05+00:00  group 'g', every 0.5 s (Ctrl-C to stop)\n\n"
        + TABLE_5
        + "\x1b[H\x1b[2J2026-01-02T03:04:06+00:00  group 'g', every 0.5 s (Ctrl-C to stop)\n\n"
        + TABLE_9
    )


def test_lag_once_prints_only_the_table_even_on_a_terminal() -> None:
    out = _Tty()
    _lag(_lag_args("--timeout", "4"), out, lag_rows=_fake_lag([5]))
    assert out.getvalue() == TABLE_5


def test_lag_timestamp_is_iso_to_the_second_with_the_utc_offset() -> None:
    stamp = cli_lag._now()
    assert len(stamp) == len("2026-01-02T03:04:05+00:00")
    assert stamp[10] == "T" and stamp[19] in "+-"


# -- main: help, errors, Ctrl-C --------------------------------------------------------------------


def test_help_has_a_one_line_description_and_lists_the_commands_in_plain_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert (
        "\nTools for kafka_direct: the word count demo, a local broker, sample data, lag and "
        "offsets.\n" in text
    )
    assert "``" not in text
    commands = text[text.index("\ncommands:\n") + 1 :].splitlines()[1:6]
    assert [line.split()[0] for line in commands] == [
        "wordcount",
        "broker",
        "produce",
        "lag",
        "offsets",
    ]
    assert "130 interrupted" in text


@pytest.mark.parametrize("command", ["lag", "produce"])
def test_ctrl_c_exits_130_with_one_line_and_no_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    def interrupted(args: Any, *rest: Any, **kw: Any) -> int:
        raise KeyboardInterrupt

    module = cli_lag if command == "lag" else cli_tools
    monkeypatch.setattr(module, f"_{command}", interrupted)
    args = ["--bootstrap-servers", "fake:9092"]
    args += ["--group", "g", "--watch", "1"] if command == "lag" else ["--topic", "t"]
    assert main([command, *args]) == 130
    captured = capsys.readouterr()
    assert captured.err == "kafka-direct: interrupted\n"
    assert captured.out == ""


def test_library_errors_become_one_line_on_stderr_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(args: Any, *rest: Any, **kw: Any) -> int:
        raise KafkaClientError("first line\nsecond line")

    monkeypatch.setattr(cli_lag, "_lag", failing)
    assert main(["lag", "--bootstrap-servers", "fake:9092", "--group", "g"]) == 2
    assert capsys.readouterr().err == "kafka-direct: KafkaClientError: first line second line\n"


def test_main_keeps_librdkafkas_own_log_for_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_lag, "_lag", lambda args, *rest: 0)
    argv = ["lag", "--bootstrap-servers", "fake:9092", "--group", "g"]
    main(argv)
    assert logging.getLogger(CLIENT_LOG).level == logging.CRITICAL
    main(["-v", *argv])
    assert logging.getLogger(CLIENT_LOG).level == logging.INFO
    logging.getLogger(CLIENT_LOG).setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (
            ["lag", "--group", "g", "--timeout", "0"],
            "argument --timeout: expected a number of seconds > 0, got '0'",
        ),
        (
            ["lag", "--group", "g", "--watch", "-1"],
            "argument --watch: expected a number of seconds > 0, got '-1'",
        ),
        (
            ["produce", "--topic", "t", "--records", "-5"],
            "argument --records: expected a whole number >= 0, got '-5'",
        ),
        (
            ["produce", "--topic", "t", "--rate", "-5"],
            "argument --rate: expected a number >= 0, got '-5'",
        ),
        (
            ["produce", "--topic", "t", "--rate", "nan"],
            "argument --rate: expected a number >= 0, got 'nan'",
        ),
        (["wordcount", "--seconds", "0"], "argument --seconds: expected a number > 0, got '0'"),
        (["wordcount", "--seconds", "inf"], "argument --seconds: expected a number > 0, got 'inf'"),
        (
            ["wordcount", "--rate", "0"],
            "argument --rate: expected a whole number >= 1, got '0'",
        ),
        (
            ["wordcount", "--rate", "2.5"],
            "argument --rate: expected a whole number >= 1, got '2.5'",
        ),
        (
            ["wordcount", "--partitions", "-2"],
            "argument --partitions: expected a whole number >= 1, got '-2'",
        ),
    ],
)
def test_bad_numbers_are_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main([argv[0], "--bootstrap-servers", "b:9092", *argv[1:]])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(f"error: {complaint}\n")


# -- offsets reset --to ----------------------------------------------------------------------------


def _cluster() -> FakeCluster:
    cluster = FakeCluster()
    cluster.create_topic("t", partitions=2, records=[10, 4])
    cluster.create_topic("other", partitions=1, records=3)
    cluster.age_out("t", 0, 2)
    return cluster


def test_reset_resolves_earliest_latest_and_minus_two_minus_one() -> None:
    reader = _cluster().reader()
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert resolve_reset(reader, ["t"], "earliest") == {t0: 2, t1: 0}
    assert resolve_reset(reader, ["t"], " LATEST ") == {t0: 10, t1: 4}
    assert resolve_reset(reader, ["t"], '{"t": {"0": -2, "1": -1}}') == {t0: 2, t1: 4}
    # Only the partitions named move; the bounds themselves are allowed.
    assert resolve_reset(reader, ["t"], '{"t": {"0": 10}}') == {t0: 10}
    assert resolve_reset(reader, ["t", "other"], '{"t": {"1": 0}, "other": {"0": 3}}') == {
        t1: 0,
        TopicPartition("other", 0): 3,
    }


REFUSALS = [
    (
        ["missing"],
        "earliest",
        "Invalid option '--topic': got 'missing', expected an existing topic. "
        "Create it first, or check the name.",
    ),
    (
        ["t"],
        "newest",
        "Invalid option '--to': got 'newest', expected earliest, latest, or per-partition JSON "
        'such as {"topic": {"0": 42, "1": -1}}. In JSON, -2 means earliest and -1 latest.',
    ),
    (
        ["t"],
        "{}",
        "Invalid option '--to': got '{}', expected at least one partition. "
        'Name one, e.g. {"topic": {"0": 42}}.',
    ),
    (
        ["t"],
        '{"t": {"0": 1',
        "Invalid option '--to': got '{\"t\": {\"0\": 1', expected per-partition JSON such as "
        '{"topic": {"0": 23, "1": -2}}. The JSON is malformed: Expecting \',\' delimiter at '
        "character 13.",
    ),
    (
        ["t"],
        '{"t": {"0": -3}}',
        "Invalid option '--to': got '{\"t\": {\"0\": -3}}', expected an offset >= 0, "
        "-2 (earliest) or -1 (latest) for t-0.",
    ),
    (
        ["t"],
        '{"t": {"0": 5}, "other": {"0": 1}}',
        "Invalid option '--to': got 'other-0', expected only partitions of the topics given "
        "with --topic (t). Add '--topic other', or remove other-0 from the JSON.",
    ),
    (
        ["t"],
        '{"t": {"0": 5, "7": 1}}',
        "Invalid option '--to': got 't-7', expected a partition that exists: topic 't' has "
        "partitions 0-1. Remove t-7 from the JSON, or check the partition number.",
    ),
    (
        ["t"],
        '{"t": {"0": 1}}',
        "Invalid option '--to': got 't-0: 1', expected an offset >= the earliest available "
        "offset 2 of t-0. Use -2 for earliest, or a larger offset.",
    ),
    (
        ["t"],
        '{"t": {"1": 5}}',
        "Invalid option '--to': got 't-1: 5', expected an offset <= the log end offset 4 of "
        "t-1. Use -1 for latest, or a smaller offset.",
    ),
]


@pytest.mark.parametrize(("topics", "to", "message"), REFUSALS)
def test_reset_refuses_what_the_source_would_refuse(
    topics: list[str], to: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_reset(_cluster().reader(), topics, to)
    assert str(info.value) == message


def test_produce_into_a_pipe_draws_no_progress_bar() -> None:
    # Issue: hand-written "\\r" redraws went into pipes and log files.
    run = _run_produce(lambda c: FakeProducer(c, {"t": _topic(2)}), "--records", "10")
    assert run.code == 0
    assert run.err == ""
    assert run.out.startswith("Delivered 10 records to topic 't' in ")


def test_produce_reports_the_time_since_the_command_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue: "Delivered 100 records in 0.00 s" for a 0.47 s run: the clock started after the
    # client was created and the topic looked up. A slow client creation must be counted.
    def slow(config: dict[str, Any]) -> FakeProducer:
        time.sleep(0.3)
        return FakeProducer(config, {"t": _topic(1)})

    out, err = io.StringIO(), io.StringIO()
    code = _produce(_produce_args("--records", "3"), out, err, producer_factory=slow)
    assert code == 0
    seconds = float(out.getvalue().split(" in ")[1].split(" s")[0])
    assert seconds >= 0.3


# -- consume ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b"\xff\xfe", "\\xff\\xfe"),  # not UTF-8
        (b"\x00\x01\x7f", "\\x00\\x01\\x7f"),  # NUL, control, DEL
        (b"\x1b[31mred", "\\x1b[31mred"),  # a terminal escape sequence
        (b"a\tb\rc\nd", "a\\tb\\rc\\nd"),  # would shift columns, rewrite or break the line
        ("h\x07name", "h\\x07name"),  # header names are escaped too
        (b"\xe2\x80\xa8", "\\u2028"),  # an invisible line separator
        (b'caf\xc3\xa9 {"k": 1}', 'café {"k": 1}'),  # printable text is left alone
    ],
)
def test_consume_escapes_every_byte_that_is_not_printable_text(
    data: bytes | str, shown: str
) -> None:
    # Issue: --print-headers escaped binary header bytes only partly.
    from kafka_direct.cli.consume import Line, format_record

    value = data.encode() if isinstance(data, str) else data
    name = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
    line = format_record(Line(headers=True), value=value, headers=[("h", value), (name, b"v")])
    assert line == f"h:{shown},{shown}:v\t{shown}"
    assert line.replace("\t", " ").isprintable()


def test_offsets_show_on_a_missing_sqlite_file_says_no_such_store_and_creates_nothing(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue: 'offsets show' against a SQLite URL created the missing file.
    missing = tmp_path / "typo.db"
    code = main(["offsets", "show", "--store", f"sqlite://{missing}", "--group", "g"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("kafka-direct: ConfigurationError: Invalid option '--store'")
    assert f"No such store: the SQLite file {missing} does not exist" in err
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []
