"""What librdkafka clients report through ``error_cb`` ends up in the errors users see: the
admin client's retries on the driver, and the fetch timeout on executors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_direct.consumer import task_consumer
from kafka_direct.consumer.fetch import PartitionConsumer, fetch_range
from kafka_direct.errors import FetchTimeoutError, KafkaClientError
from kafka_direct.kafka.events import SILENT, ClientEvents, hint, reach_advice
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.offsets import OffsetRange
from tests.unit.fakes import FakeClock, FakeConsumer, FakeLog

REFUSED = KafkaError(
    KafkaError._TRANSPORT,
    "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused "
    "(after 0ms in state CONNECT)",
)
#: The same failure again: librdkafka counts the repeats it did not report in the suffix.
REFUSED_AGAIN = KafkaError(
    KafkaError._TRANSPORT,
    "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused "
    "(after 0ms in state CONNECT, 1 identical error(s) suppressed)",
)
DOWN = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
RESOLVE = KafkaError(
    KafkaError._RESOLVE,
    "nohost:9092/bootstrap: Failed to resolve 'nohost:9092': Name or service not known "
    "(after 3ms in state CONNECT)",
)
NOT_KAFKA = KafkaError(
    KafkaError._BAD_MSG,
    "db:5432/bootstrap: Receive failed: Invalid response size 1157627904 (0..100000000): "
    "increase receive.message.max.bytes (after 1ms in state APIVERSION_QUERY)",
)
AUTH = KafkaError(
    KafkaError._AUTHENTICATION,
    "sasl: SASL authentication error: Authentication failed during authentication due to "
    "invalid credentials with SASL mechanism PLAIN",
)
TLS = KafkaError(KafkaError._SSL, "ssl://b:9093/bootstrap: SSL handshake failed")
# librdkafka's words when its OIDC token endpoint refuses the client (seen on Kafka 4.1).
OIDC = KafkaError(
    KafkaError._AUTHENTICATION,
    'Failed to acquire SASL OAUTHBEARER token: {"error": "invalid_client", '
    '"error_description": "unknown client or wrong secret"}',
)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([], ""),
        (
            [REFUSED, DOWN, REFUSED],
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused -> "
            "nothing accepts connections there: check the host and port in "
            "'kafka.bootstrap.servers' and that the broker is running (_TRANSPORT)",
        ),
        (
            [RESOLVE],
            "nohost:9092/bootstrap: Failed to resolve 'nohost:9092': Name or service not known "
            "-> check the host names in 'kafka.bootstrap.servers' (_RESOLVE)",
        ),
        ([DOWN], "1/1 brokers are down (_ALL_BROKERS_DOWN)"),
    ],
    ids=["none", "refused", "resolve", "only-down"],
)
def test_summary(events: list[KafkaError], expected: str) -> None:
    recorder = ClientEvents("client")
    for event in events:
        recorder(event)
    assert recorder.summary() == expected


@pytest.mark.parametrize(
    ("event", "hint"),
    [
        (NOT_KAFKA, "not as a Kafka broker"),
        (AUTH, "'kafka.sasl.username' and 'kafka.sasl.password'"),
        (TLS, "the 'kafka.ssl.*' options"),
        (OIDC, "clientId, clientSecret and scope in 'kafka.sasl.jaas.config'"),
    ],
)
def test_each_cause_names_what_to_check(event: KafkaError, hint: str) -> None:
    recorder = ClientEvents("client")
    recorder(event)
    assert hint in recorder.summary()


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([], SILENT),
        # librdkafka's handshake timeout ended before the caller's wait: no cause either.
        ([DOWN, DOWN], SILENT),
        ([REFUSED, DOWN], "Connection refused -> nothing accepts connections there"),
        ([DOWN, RESOLVE], "check the host names in 'kafka.bootstrap.servers'"),
        ([NOT_KAFKA], "the address answered, but not as a Kafka broker"),
    ],
    ids=["none", "only-down", "refused", "resolve", "not-kafka"],
)
def test_a_first_request_without_an_answer_says_why(
    events: list[KafkaError], expected: str
) -> None:
    """Regression: under load, librdkafka's handshake timeout to a server that never answered
    ended before the first request's, and the error said only "1/1 brokers are down" and to
    check that the brokers are running."""
    recorder = ClientEvents("client")
    for event in events:
        recorder(event)
    assert expected in recorder.unanswered()
    assert "did not answer as a Kafka broker" in SILENT


def test_newest_two_distinct_causes_first() -> None:
    recorder = ClientEvents("client")
    for event in [RESOLVE, REFUSED, NOT_KAFKA, NOT_KAFKA]:
        recorder(event)
    summary = recorder.summary()
    assert summary.index("Invalid response size") < summary.index("Connection refused")
    assert "Failed to resolve" not in summary
    assert summary.count("Invalid response size") == 1  # the timing suffix is not a difference


@pytest.mark.parametrize(
    ("event", "stops"),
    [
        (REFUSED, False),
        (RESOLVE, False),
        (DOWN, False),
        (AUTH, True),
        (TLS, True),
        (KafkaError(KafkaError._FENCED, "fenced", fatal=True), True),
    ],
    ids=["refused", "resolve", "down", "auth", "tls", "fatal"],
)
def test_only_errors_that_retrying_cannot_fix_stop_the_wait(event: KafkaError, stops: bool) -> None:
    recorder = ClientEvents("The admin client")
    recorder(event)
    recorder(event)  # librdkafka reports a real one again at every reconnect
    error = recorder.config_error()
    if stops:
        assert isinstance(error, KafkaClientError)
        assert error.retriable is False
        assert str(error).startswith("The admin client: ")
    else:
        assert error is None


@pytest.mark.parametrize(
    ("events", "stops"),
    [
        ([TLS], False),  # once: a broker restarting mid-handshake; the next connection clears it
        ([AUTH], False),
        ([TLS, REFUSED, TLS], True),
        ([KafkaError(KafkaError._FENCED, "fenced", fatal=True)], True),  # fatal: at once
    ],
    ids=["tls-once", "auth-once", "tls-twice", "fatal-once"],
)
def test_a_config_error_must_repeat_unless_fatal(events: list[KafkaError], stops: bool) -> None:
    recorder = ClientEvents("c")
    for event in events:
        recorder(event)
    assert (recorder.config_error() is not None) == stops


def test_only_events_after_the_mark_count() -> None:
    recorder = ClientEvents("c")
    recorder(AUTH)
    recorder(AUTH)
    mark = recorder.mark()
    assert recorder.config_error() is not None
    assert recorder.config_error(mark) is None  # an old failure never fails a later call
    recorder(AUTH)
    recorder(AUTH)
    assert recorder.config_error(mark) is not None


def test_each_config_error_is_a_fresh_exception() -> None:
    recorder = ClientEvents("c")
    recorder(TLS)
    recorder(TLS)
    assert recorder.config_error() is not recorder.config_error()  # tracebacks do not pile up


def test_each_distinct_event_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    recorder = ClientEvents("The consumer")
    with caplog.at_level(logging.WARNING, logger="kafka_direct.kafka.events"):
        for event in [REFUSED, DOWN, REFUSED, DOWN, REFUSED, REFUSED_AGAIN]:
            recorder(event)
    assert [r.getMessage() for r in caplog.records] == [
        "The consumer reported: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
        "Connection refused (_TRANSPORT)",
        "The consumer reported: 1/1 brokers are down (_ALL_BROKERS_DOWN)",
    ]


# --- executors: the fetch loop ---------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(task_consumer.time, "monotonic", fake.monotonic)
    return fake


def _read(pc: PartitionConsumer, frm: int, until: int) -> list[Any]:
    return list(
        fetch_range(
            pc,
            OffsetRange("orders", 0, frm, until),
            poll_timeout_ms=1000,
            fail_on_data_loss=True,
            batch_size=100,
            include_headers=False,
        )
    )


def test_a_fetch_timeout_says_what_the_consumer_reported(clock: FakeClock) -> None:
    fake = FakeConsumer(FakeLog.plain(50), clock=clock)
    fake.paused = True
    events = ClientEvents("The executor's Kafka consumer")
    events(REFUSED)
    with pytest.raises(FetchTimeoutError) as info:
        _read(PartitionConsumer(fake, events), 0, 50)
    message = str(info.value)
    assert "The consumer reported: 127.0.0.1:1/bootstrap: Connect to" in message
    assert "'kafkaConsumer.pollTimeoutMs'" in message
    assert "may be down" not in message


def test_a_fetch_timeout_without_events_keeps_the_generic_cause(clock: FakeClock) -> None:
    fake = FakeConsumer(FakeLog.plain(50), clock=clock)
    fake.paused = True
    with pytest.raises(FetchTimeoutError, match="may be down, paused or overloaded"):
        _read(PartitionConsumer(fake, ClientEvents("c")), 0, 50)


def test_a_config_error_stops_the_fetch_without_waiting_the_poll_timeout(
    clock: FakeClock,
) -> None:
    fake = FakeConsumer(FakeLog.plain(50), clock=clock)
    fake.paused = True
    events = ClientEvents("The executor's Kafka consumer")
    fake.on_consume = lambda: events(AUTH)  # reported again at every reconnect attempt
    with pytest.raises(KafkaClientError, match=r"kafka\.sasl\.password") as info:
        _read(PartitionConsumer(fake, events), 0, 50)
    assert not isinstance(info.value, FetchTimeoutError)
    assert sum(fake.waits) < 1.0  # one consume slice, not the 1000 ms poll timeout


# --- the driver: AdminOffsetReader's first contact and retries -------------------------------


class _Metadata:
    def __init__(self) -> None:
        self.topics: dict[str, Any] = {}


class FailingAdmin:
    """An AdminClient whose metadata requests fail, after ``answers`` successful ones; ``poll``
    serves the queued events (more can be queued with ``say``)."""

    def __init__(self, error_cb: ClientEvents, events: list[KafkaError], answers: int) -> None:
        self.error_cb = error_cb
        self.pending = list(events)
        self.answers = answers
        self.requests = 0
        self.timeouts: list[float] = []

    def say(self, *events: KafkaError) -> None:
        self.pending.extend(events)

    def list_topics(self, timeout: float = -1) -> Any:
        self.requests += 1
        self.timeouts.append(timeout)
        if self.answers > 0:
            self.answers -= 1
            return _Metadata()
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))

    def poll(self, timeout: float = 0) -> int:
        served, self.pending = self.pending, []
        for event in served:
            self.error_cb(event)
        return len(served)


def _reader(
    events: list[KafkaError], admins: list[FailingAdmin], answers: int = 0
) -> AdminOffsetReader:
    def factory(kafka: Any, error_cb: ClientEvents) -> FailingAdmin:
        admins.append(FailingAdmin(error_cb, events, answers))
        return admins[-1]

    return AdminOffsetReader(
        {"bootstrap.servers": "nohost:9092", "sasl.password": "hunter2"},
        num_retries=3,  # attempts in all, as Spark counts 'fetchOffset.numRetries'
        retry_interval_ms=0,
        connect_timeout_s=7.5,
        admin_factory=factory,
    )


def test_first_contact_fails_at_once_with_the_servers_and_the_cause() -> None:
    """Regression: a wrong 'kafka.bootstrap.servers' waited 120 s through every retry, and its
    only advice was to raise the retries."""
    admins: list[FailingAdmin] = []
    with pytest.raises(KafkaClientError) as info:
        _reader([RESOLVE, DOWN], admins).topic_partitions()
    message = str(info.value)
    assert "Could not reach the Kafka cluster at 'kafka.bootstrap.servers'='nohost:9092'" in message
    assert "within 7.5 s" in message
    assert "Failed to resolve 'nohost:9092'" in message
    assert "check the host names in 'kafka.bootstrap.servers'" in message
    assert "fetchOffset.numRetries" not in message  # retries cannot fix an address
    assert "hunter2" not in message
    assert info.value.retriable is False
    assert admins[0].requests == 1 and admins[0].timeouts == [7.5]


def test_once_connected_a_failure_is_retried_and_explained() -> None:
    admins: list[FailingAdmin] = []
    reader = _reader([], admins, answers=1)
    reader.connect()
    admins[0].say(REFUSED, DOWN)
    with pytest.raises(KafkaClientError) as info:
        reader.topic_partitions()
    message = str(info.value)
    assert "after 3 attempt(s)" in message
    assert "nothing accepts connections there" in message
    assert "'fetchOffset.numRetries'" in message
    assert admins[0].requests == 1 + 3


def test_failed_authentication_is_not_retried() -> None:
    admins: list[FailingAdmin] = []
    with pytest.raises(KafkaClientError) as info:
        _reader([AUTH, AUTH], admins).topic_partitions()
    assert admins[0].requests == 1
    assert info.value.code == "_AUTHENTICATION"
    assert info.value.retriable is False
    assert "'kafka.sasl.mechanism'" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_the_reader_pickles_without_its_client_or_events() -> None:
    import pickle
    import threading

    reader = AdminOffsetReader({"bootstrap.servers": "b:9092"})
    reader._admin = threading.Lock()  # stand-ins that cannot be pickled, as the real ones
    reader._events = ClientEvents("c")
    reader._connected = True
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._admin is None and clone._events is None
    assert clone._connected is False  # a new process proves its own connection


def test_an_old_tls_event_does_not_stop_the_retries_of_a_later_call() -> None:
    """The admin client lives as long as the query; a TLS hiccup long ago must not turn a later
    transport failure into a non-retriable TLS error."""
    admins: list[FailingAdmin] = []
    reader = _reader([], admins, answers=1)
    reader.connect()
    admins[0].say(TLS, TLS)
    with pytest.raises(KafkaClientError):
        reader.topic_partitions()  # the TLS events of this call stop it at once
    assert admins[0].requests == 1 + 1
    with pytest.raises(KafkaClientError) as info:
        reader.topic_partitions()  # nothing new reported: retried, and the cause is the failure
    assert admins[0].requests == 2 + 3
    assert "after 3 attempt(s)" in str(info.value)


@pytest.mark.parametrize(
    ("code", "text", "advised"),
    [
        # Authentication: "check the brokers are running" would mislead.
        (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed", False),
        (KafkaError._SSL, "SSL handshake failed", False),
        # Connection refused: the hint says so already; the advice once is enough.
        (KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 failed: Connection refused", False),
        # A cause without a hint of its own gets the general advice.
        (KafkaError._TRANSPORT, "Disconnected while requesting ApiVersion", True),
    ],
)
def test_the_reach_advice_is_given_once_and_never_for_authentication(
    code: int, text: str, advised: bool
) -> None:
    events = ClientEvents("The Kafka admin client")
    events(KafkaError(code, text))
    cause = events.summary()
    assert bool(reach_advice(cause)) is advised
    assert (cause + reach_advice(cause)).lower().count("running") <= 1


# -- hints built from what the user set, in their API's spelling -----------------------------------

# librdkafka's words for a broker certificate that did not verify: the same for an untrusted CA
# and for a trusted certificate that names another host (seen with librdkafka 2.16).
UNVERIFIED = (
    "ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured or root CA certificates are installed (install "
    "ca-certificates package)"
)
SECRET = "pa55-s3cr3t"
JAAS_LINE = f'org.apache.kafka.common.security.plain.PlainLoginModule required password="{SECRET}";'


@pytest.mark.parametrize(
    ("name", "text", "prefix", "settings", "says", "never"),
    [
        pytest.param("_SSL", UNVERIFIED, "kafka.", None,
                     ["'kafka.ssl.truststore.location'", "subject alternative names",
                      "'kafka.ssl.endpoint.identification.algorithm'"], [],
                     id="unverified, settings unknown: the truststore and the host name"),
        pytest.param("_SSL", UNVERIFIED, "kafka.",
                     {"ssl.truststore.location": "/ts.jks", "ssl.truststore.password": SECRET},
                     ["must be in 'kafka.ssl.truststore.location'", "host the client connects to"],
                     ["no truststore"], id="unverified with a truststore"),
        pytest.param("_SSL", UNVERIFIED, "", {"security.protocol": "SSL"},
                     ["no truststore is set", "'ssl.truststore.location'",
                      "'bootstrap.servers'"], ["kafka."], id="unverified, none set (kafkaParams)"),
        pytest.param("_SSL", UNVERIFIED, "kafka.",
                     {"ssl.truststore.location": "/ts.jks",
                      "ssl.endpoint.identification.algorithm": ""},
                     ["'kafka.ssl.truststore.location'"], ["subject alternative names"],
                     id="unverified without the hostname check: the issuer only"),
        pytest.param("_SSL", "SSL handshake failed: error:0A00010B:SSL routines::wrong version "
                     "number", "kafka.", None, ["does not speak TLS", "'kafka.security.protocol'"],
                     [], id="TLS to a listener without TLS"),
        pytest.param("_AUTHENTICATION", "SASL authentication error: Authentication failed",
                     "kafka.", {"sasl.jaas.config": JAAS_LINE},
                     ["username and password in 'kafka.sasl.jaas.config'"],
                     ["sasl.username", SECRET], id="authentication with a JAAS line"),
        pytest.param("SASL_AUTHENTICATION_FAILED", "Authentication failed", "",
                     {"sasl.username": "u", "sasl.password": SECRET},
                     ["'sasl.username' and 'sasl.password'"], ["jaas", "kafka.", SECRET],
                     id="authentication with librdkafka's keys (kafkaParams)"),
        pytest.param("_AUTHENTICATION", "Failed to acquire SASL OAUTHBEARER token", "",
                     {"sasl.jaas.config": JAAS_LINE},
                     ["clientId, clientSecret and scope in 'sasl.jaas.config'"],
                     ["client.id", "kafka."], id="OIDC with a JAAS line (a properties file)"),
        pytest.param("_AUTHENTICATION", "Failed to acquire SASL OAUTHBEARER token", "kafka.",
                     {"oauthProvider": "my.auth:token"}, ["the function of 'oauthProvider'"],
                     ["jaas"], id="OIDC with a token function"),
    ],
)  # fmt: skip
def test_hints_name_what_the_user_set_as_they_write_it(
    name: str, text: str, prefix: str, settings: dict[str, str] | None, says: list[str],
    never: list[str],
) -> None:  # fmt: skip
    said = hint(name, text, prefix=prefix, settings=settings)
    for phrase in says:
        assert phrase in said, said
    for phrase in never:
        assert phrase not in said, said


def test_client_events_hint_with_the_users_settings_and_keep_none_of_their_secrets() -> None:
    events = ClientEvents("client", prefix="", settings={"sasl.jaas.config": JAAS_LINE})
    events(AUTH)
    assert "username and password in 'sasl.jaas.config'" in events.summary()
    assert SECRET not in repr(vars(events))
