"""Hygiene shared by every test: the CLI's ``main()``, run in-process by some tests, sets levels
on the library's loggers (as a command-line entry point should); a later test in the same
pytest worker must not inherit them, or a warning it expects is silently dropped."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

# KAFKA_DIRECT_TEST_CPU_LOG=<file> logs each test's CPU with its processes (docs/testing.md).
pytest_plugins = ["tests.cpu_accounting"]


@pytest.fixture(autouse=True)
def _restore_kafka_direct_logger_levels() -> Iterator[None]:
    manager = logging.Logger.manager
    names = [n for n in manager.loggerDict if n == "kafka_direct" or n.startswith("kafka_direct.")]
    before = {n: logging.getLogger(n).level for n in names}
    yield
    for name in list(manager.loggerDict):
        if name == "kafka_direct" or name.startswith("kafka_direct."):
            logging.getLogger(name).setLevel(before.get(name, logging.NOTSET))
