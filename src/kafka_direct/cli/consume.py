"""The ``consume`` subcommand: print a topic's records, like ``kafka-console-consumer``. Runs in
the user's process.

It is how users look at what the sink wrote. Each record is one line: its value, preceded (in
``kafka-console-consumer``'s order) by the timestamp, partition and offset, headers and key when
asked. A null key or value prints as ``null``, no headers as ``NO_HEADERS``; bytes that are not
UTF-8 and control characters (in keys, values, header names and values) are shown as backslash
escapes, so one line stays one record and nothing reaches the terminal as a control sequence.

The command reads every partition of the topic by ``assign``, from the end (new records only)
or ``--from-beginning``, and joins no consumer group: it never moves anyone's offsets. It stops
after ``--max`` records, or once no record came for ``--timeout`` seconds, or at Ctrl-C; then
it writes ``Processed a total of N messages`` on stderr, as ``kafka-console-consumer`` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.cli.common import (
    add_command_config,
    client_config,
    positive_seconds,
    whole_number,
)
from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks
from kafka_direct.kafka.translate import config_error, kafka_errors, translate

__all__ = ["Line", "add_consume_subcommand", "format_record"]

#: How long metadata for the topic may take before the command gives up.
METADATA_TIMEOUT_S = 15.0

#: The longest single wait for records, so --timeout and Ctrl-C are noticed promptly.
POLL_SLICE_S = 0.2


class Line:
    """Which fields a printed line holds (``--print-*``) and how they are separated."""

    def __init__(
        self,
        *,
        key: bool = False,
        headers: bool = False,
        offset: bool = False,
        timestamp: bool = False,
        separator: str = "\t",
    ) -> None:
        self.key, self.headers, self.offset, self.timestamp = key, headers, offset, timestamp
        self.separator = separator


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if ch.isprintable():
        return ch
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _text(data: bytes | str | None) -> str:
    """``data`` on one line of a terminal: bytes that are not UTF-8 as ``\\xNN``, and every
    control or invisible character (newline, tab, carriage return, escape sequences, NUL...)
    escaped, so a record cannot break the line, shift the columns or drive the terminal."""
    if data is None:
        return "null"
    text = data if isinstance(data, str) else data.decode("utf-8", errors="surrogateescape")
    if text.isprintable() and not any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
        return text
    return "".join(_escape_char(ch) for ch in text)


def format_record(
    line: Line,
    *,
    value: bytes | None,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    partition: int = 0,
    offset: int = 0,
    timestamp_ms: int | None = None,
) -> str:
    """One record as ``kafka-console-consumer`` prints it with the same ``print.*`` options."""
    fields: list[str] = []
    if line.timestamp:
        fields.append("NO_TIMESTAMP" if timestamp_ms is None else f"CreateTime:{timestamp_ms}")
    if line.offset:
        fields.append(f"Partition:{partition}{line.separator}Offset:{offset}")
    if line.headers:
        shown = ",".join(f"{_text(name)}:{_text(data)}" for name, data in headers or ())
        fields.append(shown or "NO_HEADERS")
    if line.key:
        fields.append(_text(key))
    fields.append(_text(value))
    return line.separator.join(fields)


def _partitions(consumer: Any, topic: str, events: ClientEvents, timeout_s: float) -> list[int]:
    try:
        with kafka_errors(f"Fetching metadata of topic '{topic}'"):
            metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaClientError as exc:
        said = events.summary()
        raise KafkaClientError(
            f"{exc}" + (f"; the client reported: {said}" if said else ""),
            code=exc.code,
            retriable=exc.retriable,
        ) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        cause = found.error.str() if found is not None and found.error is not None else "none"
        raise TopicNotFoundError(
            f"Topic '{topic}' was not found on the cluster ({cause}). Check the name, or list "
            "the topics with a Kafka admin tool.",
            code="UNKNOWN_TOPIC_OR_PART",
        )
    return sorted(found.partitions)


def _consume(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    events = ClientEvents("The Kafka consumer")
    settings = client_config(args)
    # assign() only, never a commit: no group is joined and no offset moves. librdkafka still
    # looks the group up, so a secured cluster's ACLs apply to it: the file may name its own.
    group = settings.pop("group.id", "kafka-direct-cli-consume")
    access = Access(settings, topics=[args.topic], group=group)
    try:
        consumer = consumer_factory(
            {
                **settings,
                "group.id": group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "client.id": "kafka-direct-cli-consume",
                # With the settings: the file's secrets are scrubbed from librdkafka's lines.
                **client_hooks(events, settings),
            }
        )
    except KafkaException as exc:
        # librdkafka checks every setting here: a key of --command-config that it refuses is
        # named as the file spells it (no 'kafka.' prefix: this is not a Spark option).
        refused = config_error(exc, settings, prefix="")
        if refused is not None:
            raise refused from None
        raise translate(exc, "Creating the Kafka consumer") from exc
    line = Line(
        key=args.print_key,
        headers=args.print_headers,
        offset=args.print_offset,
        timestamp=args.print_timestamp,
        separator=args.separator,
    )
    count = 0
    try:
        partitions = _partitions(consumer, args.topic, events, METADATA_TIMEOUT_S)
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([CkTopicPartition(args.topic, p, start) for p in partitions])
        last_record = clock()
        while args.max is None or count < args.max:
            wanted = 500 if args.max is None else min(500, args.max - count)
            messages = consumer.consume(wanted, POLL_SLICE_S)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise translate(
                            KafkaException(error), f"Reading topic '{args.topic}' failed",
                            access=access,
                        )  # fmt: skip
                    continue
                kind, stamp = message.timestamp()
                out.write(
                    format_record(
                        line,
                        value=message.value(),
                        key=message.key(),
                        headers=message.headers(),
                        partition=message.partition(),
                        offset=message.offset(),
                        timestamp_ms=None if kind == 0 else stamp,
                    )
                    + "\n"
                )
                count += 1
                last_record = clock()
            out.flush()
            if args.timeout and clock() - last_record >= args.timeout:
                break
    finally:
        consumer.close()
        err.write(f"Processed a total of {count} messages\n")
    return 0


def add_consume_subcommand(sub: Any) -> None:
    con = sub.add_parser(
        "consume",
        description="Print a topic's records, one per line, like kafka-console-consumer: the "
        "value, after the timestamp, partition and offset, headers and key when asked. Reads "
        "every partition without joining a group.",
    )
    con.add_argument("topic", metavar="TOPIC")
    con.add_argument("--bootstrap-servers", required=True)
    add_command_config(con)
    con.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the oldest record (default: only records that arrive from now on)",
    )
    con.add_argument("--max", type=whole_number, default=None, help="stop after N records")
    con.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        help="stop when no record came for this many seconds (default: run until Ctrl-C)",
    )
    con.add_argument("--print-key", action="store_true", help="show each record's key")
    con.add_argument("--print-headers", action="store_true", help="show headers as k:v,k:v")
    con.add_argument("--print-offset", action="store_true", help="show partition and offset")
    con.add_argument("--print-timestamp", action="store_true", help="show the record timestamp")
    con.add_argument("--separator", default="\t", help="between fields (default: a tab)")
    con.set_defaults(func=_consume)
