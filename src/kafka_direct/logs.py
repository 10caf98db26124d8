"""The library's own logging rules. Plain library: every process.

- :class:`RepeatLimiter` keeps repeated warnings quiet: a stream waiting for a topic that does
  not exist yet, a partition whose leader does not answer, a librdkafka line said again.
- :func:`ensure_worker_logging` makes ``kafka_direct`` records visible in Spark's Python workers.
  Spark configures no Python logging there, and the library's ``NullHandler`` (right for a
  library imported by applications) would then swallow every record, data-loss warnings
  included. So the data source's entry points send ``kafka_direct`` records to stderr (Spark
  keeps workers' stderr in the driver and executor logs) unless the process already configured
  logging. ``KAFKA_DIRECT_LOG_LEVEL`` sets the level (default ``WARNING``);
  ``KAFKA_DIRECT_LOG_FILE`` appends to that file instead of stderr (set it before the
  SparkSession starts, so the workers inherit it).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["REPEAT_WINDOW_S", "RepeatLimiter", "ensure_worker_logging"]

#: How long a repeated line stays quiet.
REPEAT_WINDOW_S = 60.0


class RepeatLimiter:
    """Lets a message through at most once per ``window_s`` per key; counts what it held back.

    Thread-safe. Keys are whatever the caller says is "the same message". Old keys are dropped
    once the table grows, so a long-running process does not keep every message it ever saw.
    """

    def __init__(
        self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[object, tuple[float, int]] = {}  # key → (last shown, held back since)

    def __getstate__(self) -> dict[str, object]:
        # A lock cannot cross a process boundary, and what was shown belongs to this process.
        return {"window_s": self.window_s, "_clock": self._clock}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._seen = {}

    def allow(self, key: object) -> int | None:
        """None to hold the message back; else how many were held back since it was last shown."""
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.window_s:
                self._seen[key] = (last[0], last[1] + 1)
                return None
            if len(self._seen) > 1024:
                cutoff = now - self.window_s
                self._seen = {k: v for k, v in self._seen.items() if v[0] >= cutoff}
            self._seen[key] = (now, 0)
            return 0 if last is None else last[1]

    def log(self, logger: logging.Logger, level: int, key: object, msg: str, *args: object) -> bool:
        """``logger.log(level, msg, *args)`` unless the same ``key`` was logged within the
        window; True when it was logged."""
        held = self.allow(key)
        if held is None:
            return False
        if held:
            msg += " (%d similar message(s) in the last %.0f s were not shown)"
            args = (*args, held, self.window_s)
        logger.log(level, msg, *args)
        return True


_installed = False


def ensure_worker_logging() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    package = logging.getLogger("kafka_direct")
    configured = logging.getLogger().handlers or any(
        not isinstance(h, logging.NullHandler) for h in package.handlers
    )
    if configured:
        return  # the application (or a test runner) decides where records go
    path = os.environ.get("KAFKA_DIRECT_LOG_FILE")
    handler: logging.Handler = (
        logging.FileHandler(path, encoding="utf-8") if path else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    package.addHandler(handler)
    level = logging.getLevelName(os.environ.get("KAFKA_DIRECT_LOG_LEVEL", "WARNING").upper())
    package.setLevel(level if isinstance(level, int) else logging.WARNING)
