"""Which partitions a source read names, and where it starts and ends: ``subscribe`` /
``subscribePattern`` / ``assign``, ``offsetRanges``, and the ``starting*`` / ``ending*``
options, checked against each other and the mode. Pure: plain library, used wherever the
source's options are parsed (:mod:`~kafka_direct.config.source`); the bounds are resolved
against the broker by :mod:`kafka_direct.planning.resolve`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kafka_direct.config.kafka import Subscription
from kafka_direct.config.reader import OptionReader
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import (
    EARLIEST,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    parse_assign,
    parse_offsets_option,
    parse_ranges_option,
    parse_timestamps_option,
)

__all__ = [
    "OffsetBound",
    "assigned",
    "check_within_assign",
    "ending_bound",
    "offset_ranges",
    "refuse_partitions",
    "starting_bound",
    "subscription",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetBound:
    """Where a read starts or ends, before it is resolved against the broker.

    ``kind`` is one of: ``earliest``, ``latest``, ``specific`` (per-partition offsets, which may
    hold -2/-1), ``timestamp`` (one timestamp for all partitions), ``by_timestamp``
    (per-partition timestamps) and ``committed`` (the consumer group's committed offsets).
    """

    kind: Literal["earliest", "latest", "specific", "timestamp", "by_timestamp", "committed"]
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None
    option: str = "startingOffsets"


_NOT_WITH_RANGES = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
)


def offset_ranges(opts: OptionReader, streaming: bool | None) -> tuple[OffsetRange, ...] | None:
    """``offsetRanges``: exact ranges to read, Spark's ``KafkaUtils.createRDD`` as an option."""
    raw = opts.get("offsetRanges")
    if raw is None:
        return None
    if streaming:
        raise ConfigurationError(
            "offsetRanges",
            raw,
            "no fixed ranges in a streaming query",
            "A stream plans its own ranges: remove the option, or use spark.read.",
        )
    clash = [name for name in _NOT_WITH_RANGES if opts.get(name) is not None]
    if clash:
        raise ConfigurationError(
            "offsetRanges",
            raw,
            f"no {', '.join(repr(c) for c in clash)} beside it",
            "The ranges name the partitions and their offsets: remove the other options.",
        )
    ranges = parse_ranges_option(raw)
    if not ranges:
        raise ConfigurationError("offsetRanges", raw, "at least one range")
    return tuple(ranges)


def assigned(ranges: tuple[OffsetRange, ...]) -> Subscription:
    return Subscription("assign", partitions=tuple(sorted({r.topic_partition for r in ranges})))


def subscription(opts: OptionReader) -> Subscription:
    # Presence, not truthiness: an empty 'subscribe' is reported as such, not as "not set".
    given = [
        name for name in ("subscribe", "subscribePattern", "assign") if opts.get(name) is not None
    ]
    if len(given) != 1:
        raise ConfigurationError(
            "subscribe/subscribePattern/assign",
            ", ".join(given) or None,
            "exactly one of 'subscribe', 'subscribePattern' or 'assign'",
            "Choose one way to name the partitions to read and remove the others.",
        )
    kind = given[0]
    value = opts.get(kind) or ""
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigurationError("subscribe", value, "a comma-separated list of topics")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribePattern":
        check_java_pattern(value)
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", partitions=tuple(parse_assign(value)))


#: What Spark's patterns have that Python's ``re`` lacks: said when a pattern fails to compile.
_JAVA_ONLY = (
    "Spark takes a Java regular expression (java.util.regex), which kafka_direct matches with "
    "Python's re. Python lacks Java's \\p{...} classes (write [a-zA-Z] ranges), \\Q...\\E "
    "quoting (escape each character with \\ instead) and (?<name>...) groups (write "
    "(?P<name>...))."
)


def check_java_pattern(value: str) -> None:
    """Refuse a ``subscribePattern`` that Python's ``re`` cannot compile, or would read
    otherwise than Java, for which Spark's users wrote it."""
    if not value:
        # An empty regex matches every topic; never read the whole cluster by accident.
        raise ConfigurationError("subscribePattern", value, "a non-empty regular expression")
    # Before compiling: Python compiles these with another meaning (and a FutureWarning).
    construct = _java_class_construct(value)
    if construct is not None:
        raise ConfigurationError(
            "subscribePattern",
            value,
            "a regular expression that Java and Python read alike",
            f"It has {construct}. Spark takes a Java regular expression, which kafka_direct "
            "matches with Python's re; a topic name has no '&' nor '[', so list the characters "
            "the class keeps instead (Java's [a-z&&[^x]] is [a-wy-z]).",
        )
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigurationError(
            "subscribePattern",
            value,
            "a valid regular expression",
            f"It fails with: {exc}. {_JAVA_ONLY}",
        ) from None


def _java_class_construct(pattern: str) -> str | None:
    """The first construct inside a character class that Java reads as set arithmetic and
    Python as literal characters: ``&&`` (Java's intersection), ``[`` (Java's union)."""
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("\\Q", i):
            # Java's quoting, literal up to \E (Python refuses it when it compiles).
            end = pattern.find("\\E", i + 2)
            i = len(pattern) if end < 0 else end + 2
            continue
        if char == "\\":
            i += 2  # an escaped character is literal in both
            continue
        if not in_class:
            if char == "[":
                in_class = True
                i += 2 if pattern.startswith("^", i + 1) else 1
                # A ']' first in a class is a literal one (in Python), not its end.
                i += 1 if pattern.startswith("]", i) else 0
                continue
        elif pattern.startswith("&&", i):
            return f"'&&' inside a character class at position {i} (Java's class intersection)"
        elif char == "[":
            return f"'[' inside a character class at position {i} (Java's class union)"
        elif char == "]":
            in_class = False
        i += 1
    return None


def starting_bound(opts: OptionReader, streaming: bool | None) -> OffsetBound:
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets.
    spec = _timestamp_spec(opts, "startingTimestamp", "startingOffsetsByTimestamp")
    if spec is not None:
        return spec
    raw = opts.get("startingOffsets")
    if raw is None:
        return OffsetBound("latest" if streaming else "earliest")
    lowered = raw.lower()
    if lowered == "earliest":
        return OffsetBound("earliest")
    if lowered == "committed":
        return OffsetBound("committed")
    if lowered == "latest":
        if streaming is False:
            raise ConfigurationError(
                "startingOffsets",
                raw,
                "'earliest' or per-partition JSON in a batch query",
                "'latest' would read nothing in a batch query; use it with readStream.",
            )
        return OffsetBound("latest")
    if not raw.startswith("{"):
        raise ConfigurationError(
            "startingOffsets",
            raw,
            (
                "'earliest', 'committed' or"
                if streaming is False
                else "'earliest', 'latest', 'committed' or"
            )
            + ' JSON such as {"t": {"0": 42}}',
        )
    offsets = parse_offsets_option(raw, "startingOffsets", allow_latest=streaming is not False)
    return OffsetBound("specific", offsets=offsets)


def ending_bound(opts: OptionReader, streaming: bool | None) -> OffsetBound | None:
    if streaming:
        # Spark's validateStreamOptions refuses these two and never reads endingTimestamp in a
        # stream, so a job that sets it runs there: it runs here too, told it has no effect.
        if opts.get("endingTimestamp"):
            log.warning(
                "Option 'endingTimestamp' is ignored in a streaming query (a stream has no end), "
                "as Spark's Kafka source ignores it; remove it, or use spark.read for a bounded "
                "batch"
            )
        given = [n for n in ("endingOffsets", "endingOffsetsByTimestamp") if opts.get(n)]
        if given:
            raise ConfigurationError(
                given[0],
                opts.get(given[0]),
                "no ending offset in a streaming query",
                "A stream has no end: remove the option, or use spark.read for a bounded batch.",
            )
        return None
    spec = _timestamp_spec(opts, "endingTimestamp", "endingOffsetsByTimestamp")
    if spec is not None:
        return spec
    raw = opts.get("endingOffsets")
    if raw is None or raw.lower() == "latest":
        return OffsetBound("latest", option="endingOffsets")
    if raw.lower() == "earliest" or not raw.startswith("{"):
        raise ConfigurationError(
            "endingOffsets",
            raw,
            '\'latest\' or per-partition JSON such as {"t": {"0": 42, "1": -1}}',
            "'earliest' would make every range empty.",
        )
    offsets = parse_offsets_option(raw, "endingOffsets", allow_latest=True)
    bad = sorted(tp for tp, off in offsets.items() if off == EARLIEST)
    if bad:
        raise ConfigurationError(
            "endingOffsets", raw, f"offsets >= 0 or -1 (latest); -2 (earliest) given for {bad[0]}"
        )
    return OffsetBound("specific", offsets=offsets, option="endingOffsets")


def _timestamp_spec(
    opts: OptionReader, global_name: str, by_partition_name: str
) -> OffsetBound | None:
    stamp = opts.get(global_name)
    if stamp is not None:
        try:
            value = int(stamp)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigurationError(global_name, stamp, "epoch milliseconds as an integer >= 0")
        return OffsetBound("timestamp", timestamp=value, option=global_name)
    by_partition = opts.get(by_partition_name)
    if by_partition is not None:
        stamps = parse_timestamps_option(by_partition, by_partition_name)
        return OffsetBound("by_timestamp", offsets=stamps, option=by_partition_name)
    return None


def check_within_assign(strategy: Subscription, spec: OffsetBound) -> None:
    if strategy.kind != "assign" or spec.kind not in ("specific", "by_timestamp"):
        return
    refuse_partitions(
        spec.option,
        set(spec.offsets) - set(strategy.partitions),
        "only partitions listed in 'assign'",
        "Add them to 'assign' or remove them from the offsets.",
    )


def refuse_partitions(
    option: str, partitions: Iterable[TopicPartition], expected: str, fix: str
) -> None:
    """Refuse ``option`` naming ``partitions`` (sorted), when there are any."""
    listed = sorted(partitions)
    if listed:
        raise ConfigurationError(option, ", ".join(str(tp) for tp in listed), expected, fix)
