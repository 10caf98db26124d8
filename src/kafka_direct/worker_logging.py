"""Logging inside Spark's Python workers. Runs in the driver's planner and stream-runner
processes and in executors (wherever Spark runs the data source's code).

Spark configures no Python logging in its workers, and the library's ``NullHandler`` (right for
a library imported by applications) would then swallow every record, data-loss warnings
included. So the data source's entry points call :func:`ensure_worker_logging`, which sends
``kafka_direct`` records to stderr (Spark keeps workers' stderr in the driver and executor
logs) unless the process already configured logging. ``KAFKA_DIRECT_LOG_LEVEL`` sets the level
(default ``WARNING``); ``KAFKA_DIRECT_LOG_FILE`` appends to that file instead of stderr (set it
before the SparkSession starts, so the workers inherit it).
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["ensure_worker_logging"]

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
