"""Each client's ``error_cb``: why a request failed. Plain library: the Spark driver and
executors.

A failed request only says "Broker transport failure" or times out; the client's own events say
why (a host name that does not resolve, a refused connection, a server that is not Kafka, failed
authentication), and that cause is what an error message needs. :class:`ClientEvents` keeps the
last few, logs each new one once, and tells callers when waiting cannot help.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping

from confluent_kafka import KafkaError

from kafka_direct.errors import KafkaClientError

__all__ = ["SILENT", "ClientEvents", "hint", "reach_advice"]

log = logging.getLogger(__name__)

_TIMING = re.compile(
    r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)\s*$"
)

#: Why a first request got no answer when the client reported no cause: the connection was
#: accepted, then nothing answered (another service on the port, a TLS or SASL listener, a
#: paused broker).
SILENT = (
    "something accepts connections there but did not answer as a Kafka broker. Check the port "
    "in 'kafka.bootstrap.servers' (it may be another service), that 'kafka.security.protocol' "
    "matches the listener (TLS, SASL), and that the broker is not paused or overloaded"
)

# Errors that retrying cannot fix: the configuration is wrong.
_CONFIG_ERRORS = {
    "_AUTHENTICATION",
    "SASL_AUTHENTICATION_FAILED",
    "_SSL",
    "_INVALID_ARG",
    "UNSUPPORTED_SASL_MECHANISM",
    "ILLEGAL_SASL_STATE",
}


_HOSTNAME_CHECK = "ssl.endpoint.identification.algorithm"
#: The SASL failures whose cause is the client's mechanism or credentials.
_AUTH_CODES = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE"}


def _credentials(p: str, settings: Mapping[str, str] | None) -> str:
    """Where the user's SASL username and password are, as they set them."""
    if settings is not None and "sasl.jaas.config" in settings:
        return f"'{p}sasl.mechanism' and the username and password in '{p}sasl.jaas.config'"
    if settings is not None and "sasl.username" in settings:
        return f"'{p}sasl.mechanism', '{p}sasl.username' and '{p}sasl.password'"
    return (
        f"'{p}security.protocol', '{p}sasl.mechanism' and the credentials: the username and "
        f"password in '{p}sasl.jaas.config' (or '{p}sasl.username' and '{p}sasl.password')"
    )


def _oauth(p: str, settings: Mapping[str, str] | None) -> str:
    """Where the user's OAUTHBEARER credentials are, as they set them."""
    jaas = f"clientId, clientSecret and scope in '{p}sasl.jaas.config'"
    native = f"'{p}sasl.oauthbearer.client.id', '.client.secret' and '.scope'"
    endpoint = f"'{p}sasl.oauthbearer.token.endpoint.url'"
    if settings is not None and "oauthProvider" in settings:
        return "check the function of 'oauthProvider' and the credentials it uses"
    if settings is not None and "sasl.jaas.config" in settings:
        return f"check the OAUTHBEARER credentials: {jaas}, and {endpoint}"
    if settings is not None and "sasl.oauthbearer.client.id" in settings:
        return f"check the OAUTHBEARER credentials: {native}, and {endpoint}"
    return (
        f"check the OAUTHBEARER credentials: {jaas} (or {native}), {endpoint}, or the function "
        "of 'oauthProvider'"
    )


def _untrusted(p: str, settings: Mapping[str, str] | None) -> str:
    """Why a broker's certificate did not verify: its issuer, or its names. librdkafka's words
    name its own ssl.ca.location whatever the user set."""
    trusts = ("ssl.truststore.location", "ssl.truststore.certificates", "ssl.ca.location",
              "ssl.ca.pem")  # fmt: skip
    given = [k for k in trusts if settings and k in settings]
    if given:
        trust = f"the CA that signed it must be in '{p}{given[0]}'"
    elif settings is not None:
        trust = (
            "no truststore is set, so only the system's CA certificates are trusted: set "
            f"'{p}ssl.truststore.location' (and its password) to a store holding the CA that "
            "signed it"
        )
    else:
        trust = (
            f"the CA that signed it must be in the truststore ('{p}ssl.truststore.location' or "
            f"'{p}ssl.truststore.certificates'; without one, the system's CA certificates)"
        )
    hostname = ""
    algorithm = (settings or {}).get(_HOSTNAME_CHECK)
    if algorithm is None or algorithm.strip().lower() == "https":
        hostname = (
            ", and its names (subject alternative names) must include the host the client "
            f"connects to (in '{p}bootstrap.servers' or the broker's advertised listener): the "
            "host name is checked as in the Java client, and an empty "
            f"'{p}ssl.endpoint.identification.algorithm' turns that check off"
        )
    return f"the broker's certificate was not accepted: {trust}{hostname}"


def hint(name: str, text: str, *, prefix: str = "kafka.",
         settings: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """What to check for one client event, naming the options involved as the user writes them
    (``prefix``: ``kafka.`` for options, nothing for ``kafkaParams`` and properties files).
    ``settings`` are the user's Kafka settings as given (names without the prefix, before any
    translation), to name those they set; None when they are not known. No value of theirs is
    ever quoted."""
    p = prefix
    if name == "_RESOLVE":
        return f"check the host names in '{p}bootstrap.servers'"
    if "Connection refused" in text:
        return (
            "nothing accepts connections there: check the host and port in "
            f"'{p}bootstrap.servers' and that the broker is running"
        )
    if "Invalid response size" in text or name == "_BAD_MSG":
        return (
            "the address answered, but not as a Kafka broker; check the port in "
            f"'{p}bootstrap.servers', or set '{p}security.protocol' if it expects TLS"
        )
    if "OAUTHBEARER" in text:
        return _oauth(p, settings)
    if name in _AUTH_CODES:
        return f"check {_credentials(p, settings)}"
    if name == "_SSL":
        if "certificate verify failed" in text:
            return _untrusted(p, settings)
        if "wrong version number" in text or "packet length too long" in text:
            return f"the listener does not speak TLS there: check '{p}security.protocol'"
        if "certificate required" in text:
            return (
                f"the broker wants a client certificate: set '{p}ssl.keystore.location' (or "
                f"'{p}ssl.keystore.certificate.chain' and '{p}ssl.keystore.key')"
            )
        return f"check '{p}security.protocol' and the '{p}ssl.*' options"
    return ""


class ClientEvents:
    """A librdkafka client's ``error_cb``: keeps its last few error events, and logs each new one.

    librdkafka recovers from most of these by itself (a broker restarting, a lost connection),
    so they do not fail anything here; they explain a failure or a timeout that follows. Errors
    that retrying cannot fix (authentication, TLS, a fatal client error) let callers stop
    waiting: see :meth:`config_error`. Thread-safe: librdkafka calls it from ``poll``/``consume``
    in whichever thread runs them.
    """

    def __init__(
        self,
        client: str,
        keep: int = 8,
        *,
        prefix: str = "kafka.",
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        # How the user writes the options, and which they set, for the hints (see hint()); of
        # their values only the one the hints read is kept: the others may be secrets.
        self._prefix = prefix
        self._settings = (
            {k: v if k == _HOSTNAME_CHECK else "" for k, v in settings.items()}
            if settings is not None
            else None
        )
        self._events: deque[tuple[str, str]] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._count = 0
        #: (event number, name, text, fatal) of recent authentication/TLS/fatal events.
        self._config_events: deque[tuple[int, str, str, bool]] = deque(maxlen=keep)
        self._scrub: Callable[[str], str] | None = None

    def scrub_with(self, scrub: Callable[[str], str]) -> None:
        """Pass every later event's text through ``scrub`` before it is logged or kept: the
        client's secret values (:func:`kafka_direct.kafka.logs.client_hooks` sets it), which
        librdkafka may quote (the unsecured-JWT parser quotes ``sasl.oauthbearer.config``)."""
        self._scrub = scrub

    def __call__(self, error: KafkaError) -> None:
        # Without librdkafka's timing suffix, a repeated event reads the same every time.
        name, text = error.name(), _TIMING.sub("", error.str())
        if self._scrub is not None:
            text = self._scrub(text)
        with self._lock:
            self._count += 1
            new = (name, text) not in self._events
            self._events.append((name, text))
            if name in _CONFIG_ERRORS or error.fatal():
                self._config_events.append((self._count, name, text, bool(error.fatal())))
        if new:  # librdkafka repeats its events at every reconnect attempt
            log.warning("%s reported: %s (%s)", self._client, text, name)

    def mark(self) -> int:
        """A point in the event stream, for :meth:`config_error`."""
        with self._lock:
            return self._count

    def config_error(self, since: int = 0) -> KafkaClientError | None:
        """An error that waiting cannot fix, reported after ``since`` (a :meth:`mark`), or None.

        A fatal error counts at once. Authentication and TLS errors count when reported at least
        twice: librdkafka reports a real one again at every reconnect, while a broker restarting
        in the middle of a handshake gives one that the next connection clears. Callers take a
        mark when they start, and again whenever they make progress, so an old event never
        fails a later call.
        """
        with self._lock:
            recent = [e for e in self._config_events if e[0] > since]
        if not recent or (len(recent) < 2 and not any(fatal for *_, fatal in recent)):
            return None
        _, name, text, _ = recent[-1]
        return KafkaClientError(
            f"{self._client}: {self._with_hint(name, text)} ({name})", code=name, retriable=False
        )

    def unanswered(self) -> str:
        """Why a first request got no answer: :meth:`summary`, or :data:`SILENT` when the client
        reported no cause. "n/n brokers are down" alone is no cause: librdkafka says only that
        when its own handshake timeout (10 s, as long as a caller's first wait) ends first, and
        which of the two ends first is a matter of load."""
        with self._lock:
            causes = {name for name, _ in self._events} - {"_ALL_BROKERS_DOWN"}
        return self.summary() if causes else SILENT

    def summary(self) -> str:
        """The distinct causes reported so far, newest first, with what to check; or ''."""
        with self._lock:
            events = list(self._events)
        seen: list[tuple[str, str]] = []
        for name, text in reversed(events):
            # "n/n brokers are down" only restates the others.
            if name != "_ALL_BROKERS_DOWN" and all(text != t for _, t in seen):
                seen.append((name, text))
        if not seen and events:
            seen = [events[-1]]
        return "; ".join(f"{self._with_hint(name, text)} ({name})" for name, text in seen[:2])

    def _with_hint(self, name: str, text: str) -> str:
        said = hint(name, text, prefix=self._prefix, settings=self._settings)
        return f"{text}{_HINTED}{said}" if said else text


def reach_advice(cause: str) -> str:
    """The general advice for a cluster that could not be reached, unless ``cause`` (a
    :meth:`ClientEvents.summary`) already says what to check: given twice it is noise, and after
    an authentication or TLS failure "check that the brokers are running" misleads."""
    if _HINTED in cause or "check " in cause.lower():
        return ""
    return " Check the address and that the brokers are running."


_HINTED = " -> "
