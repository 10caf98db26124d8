"""What the command line's subcommands share: exit statuses, argument types, the name of the
client log. Runs in the user's process."""

from __future__ import annotations

import argparse

__all__ = [
    "CLIENT_EVENTS_LOG",
    "CLIENT_LOG",
    "EXIT_INTERRUPTED",
    "positive_seconds",
    "whole_number",
]

#: Where librdkafka's own log lines go, from every client (see ``kafka_direct.kafka.logs``).
#: ``cli.main`` shows them with ``--verbose`` only: each cause reaches the user once anyway,
#: through the clients' ``error_cb`` and the final message.
CLIENT_LOG = "kafka_direct.librdkafka"

#: Where each client's error events are logged once (``kafka_direct.kafka.events``).
CLIENT_EVENTS_LOG = "kafka_direct.kafka.events"

#: The exit status after Ctrl-C: the shell's convention for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def whole_number(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value
