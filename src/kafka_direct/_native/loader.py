"""One loader for both C extensions: the read side's ``kafka_direct.consumer._rdkafka_arrow``
and the write side's ``kafka_direct.producer._rdkafka_produce``. Runs in Spark executors (Python
workers), and wherever a fast path's status is asked.

Both are loaded the same way, at most once per process: against the librdkafka that
confluent-kafka loaded (:func:`librdkafka_path`), with one switch to turn both off
(``KAFKA_DIRECT_NATIVE=0`` in the Python workers' environment, :data:`DISABLE_ENV`), raising
one exception class (:class:`NativeFailure`, translated like confluent-kafka's own), and with
their librdkafka log lines routed to Python ``logging`` the same way (:func:`route_log_lines`).
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kafka_direct.kafka.logs import LIBRDKAFKA_LOG

__all__ = [
    "DISABLE_ENV",
    "NativeExtension",
    "NativeFailure",
    "librdkafka_path",
    "route_log_lines",
]

log = logging.getLogger(__name__)

#: Set to ``0`` in the Python workers' environment to read and write through confluent-kafka's
#: Python objects instead of the C fast paths.
DISABLE_ENV = "KAFKA_DIRECT_NATIVE"

# syslog's WARNING, the level of the note that lines were dropped.
_LOG_WARNING = 4


class NativeFailure(KafkaException):
    """What both extensions raise: a ``KafkaException`` like confluent-kafka's own, so it goes
    through the same translation (``kafka_direct.kafka.translate.kafka_errors``)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(KafkaError(code, reason))


def librdkafka_path() -> str | None:
    """The librdkafka that confluent-kafka uses: mapped into this process, or beside it."""
    import confluent_kafka

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if "librdkafka" in os.path.basename(path) and os.path.isfile(path):
                    return path
    except OSError:
        pass
    package_dir = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    for pattern in ("confluent_kafka.libs/librdkafka*", "confluent_kafka/.dylibs/librdkafka*"):
        found = sorted(glob.glob(os.path.join(package_dir, pattern)))
        if found:
            return found[0]
    import ctypes.util

    return ctypes.util.find_library("rdkafka")


def route_log_lines(
    client: str,
    lines: Iterable[tuple[int, str, str]],
    dropped: int,
    dropped_worst: int,
    scrub: Callable[[str], str] | None = None,
) -> None:
    """An extension's librdkafka log lines (syslog level, facility, text) to
    :data:`~kafka_direct.kafka.logs.LIBRDKAFKA_LOG`, named by ``client``, and a note when the
    extension's buffer dropped some. ``scrub`` removes the client's secret values, which
    librdkafka may quote (an OIDC token endpoint's URL, say): see
    :func:`kafka_direct.redaction.config_scrubber`."""
    for level, facility, line in lines:
        LIBRDKAFKA_LOG.emit(level, "%s [%s] %s", (facility, client, line), scrub)
    if dropped:
        LIBRDKAFKA_LOG.log(
            _LOG_WARNING,
            "%s [%s] %s",
            "LOGDROP",
            client,
            f"{dropped} older log line(s) were dropped, the most severe of syslog level "
            f"{dropped_worst}: more came during one call than the fast path keeps",
        )


class NativeExtension:
    """One of the C extensions, loaded at most once per process against the librdkafka
    confluent-kafka uses, or the reason it cannot be used.

    ``clients`` names what the extension creates, for the log line about log routing.
    """

    def __init__(self, import_extension: Callable[[], Any], clients: str) -> None:
        self._import_extension = import_extension
        self._clients = clients
        self._lock = threading.Lock()
        self._module: Any = None
        self.version: str | None = None
        self.reason: str | None = None

    def load(self) -> Any:
        """The extension module, or None (then :attr:`reason` says why). Decided once."""
        with self._lock:
            if self._module is None and self.reason is None:
                self._module, self.version, self.reason = self._load_once()
            return self._module

    def available(self) -> bool:
        return self.load() is not None

    def status(self, fast_path: str) -> str:
        """``fast_path`` (with ``{version}``) if the extension is used, else the reason why not."""
        if self.available():
            return fast_path.format(version=self.version)
        return f"Python path: {self.reason}"

    def _load_once(self) -> tuple[Any, str | None, str | None]:
        if os.environ.get(DISABLE_ENV, "1").strip() == "0":
            return None, None, f"disabled by {DISABLE_ENV}=0"
        try:
            extension = self._import_extension()
        except ImportError as exc:
            # "from package import _ext" of an extension that was never built says "cannot
            # import name"; a module that is there but fails to load says something else.
            missing = isinstance(exc, ModuleNotFoundError) or "cannot import name" in str(exc)
            if not missing:
                return None, None, f"the C extension could not be loaded ({exc})"
            return (
                None,
                None,
                (
                    "the C extension was not compiled when kafka-direct was installed (there was "
                    "no C compiler or no Python headers), so rows go through confluent-kafka's "
                    "Python objects, slower; reinstall where 'cc' and the Python headers are "
                    "present to get it"
                ),
            )
        path = librdkafka_path()
        if path is None:
            return None, None, "confluent-kafka's librdkafka was not found"
        try:
            version = str(extension.load(path))
        except ImportError as exc:
            return None, None, str(exc)
        extension.set_failure(NativeFailure)
        log.debug("kafka_direct %s: librdkafka %s from %s", extension.__name__, version, path)
        if not extension.logs_routable():
            log.debug(
                "librdkafka %s has no log queue API: the fast path's %s run with log_level=0 "
                "(their log lines are not shown)",
                version,
                self._clients,
            )
        return extension, version, None
