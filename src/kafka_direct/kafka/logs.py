"""librdkafka's log lines through Python ``logging``. Plain library: wherever a Kafka client is
created (driver, executors, the CLI).

Left alone, librdkafka prints its log lines to stderr: a wrong ``kafka.bootstrap.servers`` gave
thousands of ``%3|...|FAIL|...Connection refused`` lines on the console. Every client the library
creates passes :data:`LIBRDKAFKA_LOG` as confluent-kafka's ``logger`` setting instead, so the
lines go to the ``kafka_direct.librdkafka`` logger, where the application's logging decides what
to show. Two rules keep them few:

- A connection failure (librdkafka's ``FAIL`` facility) is also reported to the client's
  ``error_cb`` (:class:`kafka_direct.kafka.events.ClientEvents`), which logs it once with a hint
  of what to check; the raw line goes out at DEBUG.
- Lines that say the same thing again (numbers aside) within a minute are dropped; the next one
  that gets through says how many were dropped (:class:`kafka_direct.logs.RepeatLimiter`).

librdkafka quotes some settings in its lines and error events ('Failed to retrieve OIDC token
from "<sasl.oauthbearer.token.endpoint.url>"', the unsecured-JWT parser's quotes of
``sasl.oauthbearer.config``). :func:`client_hooks` therefore gives a client whose config holds
secrets its own logger, and its ``error_cb`` a scrubber, which replace those values before a
line is logged or kept (:class:`kafka_direct.redaction.Scrubber`, built once per client).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

from kafka_direct.config.oauth import oauth_callback
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.logs import RepeatLimiter
from kafka_direct.redaction import Scrubber, config_scrubber

__all__ = ["LIBRDKAFKA_LOG", "ClientLog", "LibrdkafkaLog", "client_hooks", "client_scrubber"]

# syslog levels (librdkafka's) → logging levels.
_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR}
_LEVELS.update({4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG})

# What makes two lines "the same": everything but numbers (ports, counts, timings, offsets).
_NUMBERS = re.compile(r"\d+")


class LibrdkafkaLog:
    """What confluent-kafka's ``logger`` setting calls: ``log(level, fmt, *args)``.

    confluent-kafka calls it with librdkafka's syslog level (0-7) and ``"%s [%s] %s"`` with the
    facility, the client's name and the line.
    """

    def __init__(self, logger: logging.Logger, limiter: RepeatLimiter | None = None) -> None:
        self.logger = logger
        self.limiter = limiter or RepeatLimiter()

    def log(self, level: int, msg: str, *args: object) -> None:
        self.emit(level, msg, args)

    def emit(
        self,
        level: int,
        msg: str,
        args: tuple[object, ...],
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        """One line, its secret values replaced by ``scrub`` (only once it is to be logged)."""
        facility = str(args[0]) if args else ""
        text = str(args[-1]) if args else msg
        py_level = _LEVELS.get(level, logging.DEBUG) if isinstance(level, int) else logging.INFO
        if facility == "FAIL":
            py_level = logging.DEBUG  # error_cb reports it once, with what to check
        if not self.logger.isEnabledFor(py_level):
            return
        if scrub is not None:
            text = scrub(text)
        key = (py_level, facility, _NUMBERS.sub("#", text))
        self.limiter.log(self.logger, py_level, key, "librdkafka %s: %s", facility, text)


class ClientLog:
    """The ``logger`` of one client whose config holds secrets: :data:`LIBRDKAFKA_LOG`'s rules
    (looked up at each line, so its logger and limiter stay the one place to change them), with
    the client's secret values scrubbed from every line."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        self._scrub = scrub

    def log(self, level: int, msg: str, *args: object) -> None:
        LIBRDKAFKA_LOG.emit(level, msg, args, self._scrub)

    def __repr__(self) -> str:
        return "ClientLog(kafka_direct.librdkafka, secret values scrubbed)"


#: The ``logger`` every client the library creates uses (see the module docstring).
LIBRDKAFKA_LOG = LibrdkafkaLog(logging.getLogger("kafka_direct.librdkafka"))


def client_scrubber(
    config: Mapping[str, str], events: ClientEvents | None = None
) -> Scrubber | None:
    """The scrubber of ``config``'s secret values, or None when it has none; ``events`` (the
    client's error events) scrub with it too. For clients made without :func:`client_hooks`
    (the C fast paths), which route their log lines themselves."""
    scrub = config_scrubber(config) or None
    if scrub is not None and events is not None:
        events.scrub_with(scrub)
    return scrub


def client_hooks(
    error_cb: object | None = None, config: Mapping[str, str] | None = None
) -> dict[str, object]:
    """The non-string settings of a confluent-kafka client: logs to :data:`LIBRDKAFKA_LOG`,
    errors to ``error_cb`` when given (a :class:`~kafka_direct.kafka.events.ClientEvents`), and
    the ``oauth_cb`` of the token function that the client's ``config`` names, if it names one
    (the ``oauthProvider`` option, :mod:`kafka_direct.config.oauth`). Without ``config`` nothing
    can be scrubbed from the client's lines and events: pass it wherever the client has one."""
    scrub = (
        client_scrubber(config, error_cb if isinstance(error_cb, ClientEvents) else None)
        if config is not None
        else None
    )
    hooks: dict[str, object] = {"logger": ClientLog(scrub) if scrub else LIBRDKAFKA_LOG}
    if error_cb is not None:
        hooks["error_cb"] = error_cb
    oauth_cb = oauth_callback(config) if config is not None else None
    if oauth_cb is not None:
        hooks["oauth_cb"] = oauth_cb
    return hooks
