"""What the command line's subcommands share: exit statuses, argument types, the name of the
client log. Runs in the user's process."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "CLIENT_EVENTS_LOG",
    "CLIENT_LOG",
    "EXIT_INTERRUPTED",
    "add_command_config",
    "as_file_keys",
    "client_config",
    "non_negative_number",
    "positive_number",
    "positive_seconds",
    "positive_whole_number",
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


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (argparse names the flag in its message)."""
    value = _finite(text)
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_number(text: str) -> float:
    """An argparse type: a finite number >= 0 (0 usually means "no limit")."""
    value = _finite(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _finite(text: str) -> float | None:
    # float() takes 'nan' and 'inf': neither is a rate or a duration a loop can use.
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def positive_whole_number(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
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


def add_command_config(parser: Any) -> None:
    """``--command-config PATH``: a Kafka client properties file, as Kafka's own tools take."""
    parser.add_argument(
        "--command-config",
        metavar="PATH",
        default=None,
        help="a Kafka client properties file (key=value, as for kafka-console-consumer.sh): "
        "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location...",
    )


def client_config(args: argparse.Namespace, bootstrap: str | None = None) -> dict[str, str]:
    """The client settings a command connects with: ``bootstrap`` (``--bootstrap-servers`` by
    default) and what ``--command-config`` holds, translated as a Spark job's options are
    (:mod:`kafka_direct.config.properties`)."""
    from kafka_direct.config.properties import client_properties
    from kafka_direct.errors import ConfigurationError

    servers = bootstrap if bootstrap is not None else getattr(args, "bootstrap_servers", None)
    path = getattr(args, "command_config", None)
    if not path:
        return {"bootstrap.servers": servers or ""}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            "--command-config", path, "a readable Kafka client properties file",
            f"It could not be read ({exc.strerror or exc}).",
        ) from None  # fmt: skip
    source = f"--command-config {path}"
    return dict(client_properties(text, source=source, bootstrap_servers=servers))


@contextmanager
def as_file_keys(settings: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, a setting librdkafka refuses is named as the command's settings (its
    ``--command-config`` file) spell it, ``foo.bar``, not as a Spark option, ``kafka.foo.bar``.

    The library's clients name a refused setting with the source's ``kafka.`` prefix, and
    raise that error while handling librdkafka's: its ``__context__`` is librdkafka's error,
    from which :func:`~kafka_direct.kafka.translate.config_error` names it again.
    """
    from kafka_direct.errors import ConfigurationError

    try:
        yield
    except ConfigurationError as exc:
        from confluent_kafka import KafkaException

        from kafka_direct.kafka.translate import config_error

        cause = exc.__context__
        if exc.option.startswith("kafka.") and isinstance(cause, KafkaException):
            renamed = config_error(cause, settings, prefix="")
            if renamed is not None:
                raise renamed from None
        raise
