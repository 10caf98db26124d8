"""The ``offsets show|reset`` subcommands: look at and move a group's stored offsets. Runs in
the user's process.

The store is named by a URL (:func:`kafka_direct.stores.url.open_store`): ``kafka://HOST:PORT``,
``sqlite:///PATH``, ``postgresql://USER@HOST/DB`` or ``mysql://USER@HOST/DB``. A reset is
checked as the source checks its starting offsets: every partition must exist and belong to the
topics given, and every offset must lie within its partition's log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

from kafka_direct.cli.common import (
    add_command_config,
    as_file_keys,
    client_config,
    positive_seconds,
)
from kafka_direct.config.kafka import Subscription
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    parse_offsets_option,
)
from kafka_direct.planning.reader import OffsetReader
from kafka_direct.planning.resolve import check_within_log_end
from kafka_direct.stores.url import open_store

__all__ = ["add_offsets_subcommand", "brokers", "reset_cluster", "resolve_reset"]

#: The port librdkafka (and Java's client) assume for an address given without one.
_KAFKA_PORT = 9092


def _refuse_missing_sqlite(url: str) -> None:
    """``show`` reads; opening a missing SQLite file would create it (an empty store), and a
    typo in the path would then look like a group without offsets."""
    parts = urlsplit(url)
    if parts.scheme.lower() == "sqlite" and parts.path and not os.path.exists(parts.path):
        raise ConfigurationError(
            "--store",
            url,
            "an existing offset store",
            f"No such store: the SQLite file {parts.path} does not exist. Check the path; "
            "'offsets reset' creates the file.",
        )


def brokers(servers: str) -> frozenset[str]:
    """A ``bootstrap.servers`` list as a set of ``host:port``, to compare two of them: hosts
    in lower case, the listener prefix (``SASL_SSL://``) dropped, Kafka's port 9092 added where
    none is given. Names are not resolved: ``localhost`` and ``127.0.0.1`` differ."""
    found = set()
    for item in servers.split(","):
        address = item.strip().lower().rpartition("://")[2].rstrip("/")
        if not address:
            continue
        host, colon, port = address.rpartition(":")
        if not colon or host.endswith(":") or address.endswith("]"):  # no port, or bare IPv6
            host, port = address, str(_KAFKA_PORT)
        found.add(f"{host}:{int(port) if port.isdigit() else port}")
    return frozenset(found)


def reset_cluster(store: str, bootstrap_servers: str | None) -> str | None:
    """The cluster ``offsets reset`` resolves offsets against: ``--bootstrap-servers``, or a
    ``kafka://`` store's own address when it is not given.

    A kafka:// store commits to the cluster of its URL, so offsets resolved on another
    cluster would be another cluster's: both given and naming different brokers is refused.
    None leaves the address to ``--command-config`` (its ``bootstrap.servers``).
    """
    parts = urlsplit(store)
    if parts.scheme.lower() != "kafka" or not parts.netloc:
        return bootstrap_servers
    if bootstrap_servers is None:
        return parts.netloc
    if brokers(bootstrap_servers) != brokers(parts.netloc):
        raise ConfigurationError(
            "--bootstrap-servers",
            bootstrap_servers,
            f"the brokers of the kafka:// store ({parts.netloc}): the offsets are committed "
            "there, so they must be resolved there",
            "Leave out --bootstrap-servers to use the store's address, or name the same "
            "brokers in both.",
        )
    return bootstrap_servers


def _store_security(args: argparse.Namespace) -> dict[str, str]:
    """A kafka:// store's client settings from --command-config (its address is the URL's)."""
    if not getattr(args, "command_config", None):
        return {}
    settings = client_config(args, bootstrap="-")
    settings.pop("bootstrap.servers", None)
    return settings


def _show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    _refuse_missing_sqlite(args.store)
    security = _store_security(args)
    with as_file_keys(security), open_store(args.store, security) as store:
        offsets = store.load(args.group)
    if not offsets:
        out.write(f"group '{args.group}' has no stored offsets\n")
        return 0
    out.write(f"{'TOPIC':<30} {'PARTITION':>9} {'NEXT-OFFSET':>12}\n")
    for tp, off in sorted(offsets.items()):
        out.write(f"{tp.topic:<30} {tp.partition:>9} {off:>12}\n")
    return 0


def resolve_reset(reader: OffsetReader, topics: Sequence[str], to: str) -> PartitionOffsets:
    """The offsets ``--to`` asks for, checked against the cluster the way the source checks
    ``startingOffsets`` (:func:`kafka_direct.planning.resolve.resolve_starting`):

    - every ``--topic`` must exist;
    - ``earliest`` / ``latest`` move every partition of those topics;
    - JSON moves only the partitions it names; each must exist and belong to a ``--topic``;
      ``-2`` / ``-1`` mean earliest / latest, and any other offset must lie within
      ``[earliest, log end]`` of its partition (the log end itself means "nothing left to read").

    Raises :class:`ConfigurationError` naming ``--topic`` or ``--to``, the value, what was
    expected and how to fix it.
    """
    names = tuple(dict.fromkeys(topics))
    tps = reader.partitions(Subscription("subscribe", topics=names))
    partitions: dict[str, list[int]] = {}
    for tp in sorted(tps):
        partitions.setdefault(tp.topic, []).append(tp.partition)
    for topic in names:
        if topic not in partitions:
            raise ConfigurationError(
                "--topic", topic, "an existing topic", "Create it first, or check the name."
            )
    text = to.strip()
    if text.lower() == "earliest":
        return reader.earliest(tps)
    if text.lower() == "latest":
        return reader.latest(tps)
    if not text.startswith("{"):
        raise ConfigurationError(
            "--to",
            to,
            'earliest, latest, or per-partition JSON such as {"topic": {"0": 42, "1": -1}}',
            "In JSON, -2 means earliest and -1 latest.",
        )
    wanted = parse_offsets_option(text, "--to")
    if not wanted:
        raise ConfigurationError(
            "--to", text, "at least one partition", 'Name one, e.g. {"topic": {"0": 42}}.'
        )
    for tp in sorted(wanted):
        if tp.topic not in names:
            raise ConfigurationError(
                "--to",
                str(tp),
                f"only partitions of the topics given with --topic ({', '.join(names)})",
                f"Add '--topic {tp.topic}', or remove {tp} from the JSON.",
            )
        if tp not in tps:
            raise ConfigurationError(
                "--to",
                str(tp),
                f"a partition that exists: topic '{tp.topic}' has partitions "
                + _spans(partitions[tp.topic]),
                f"Remove {tp} from the JSON, or check the partition number.",
            )
    earliest = reader.earliest(wanted)
    latest = reader.latest(wanted)
    targets = {
        tp: earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        for tp, off in wanted.items()
    }
    for tp in sorted(targets):
        if targets[tp] < earliest[tp]:
            # Below the log start the records are gone (retention, a recreated topic): the group
            # would fail or skip on its next read instead of starting where it was told.
            raise ConfigurationError(
                "--to",
                f"{tp}: {targets[tp]}",
                f"an offset >= the earliest available offset {earliest[tp]} of {tp}",
                "Use -2 for earliest, or a larger offset.",
            )
    check_within_log_end("--to", targets, latest, "Use -1 for latest, or a smaller offset.")
    return targets


def _spans(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2, 5``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _reset(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from kafka_direct.config.kafka import KafkaConfig
    from kafka_direct.kafka.offset_reader import AdminOffsetReader

    out = out or sys.stdout
    bootstrap = reset_cluster(args.store, args.bootstrap_servers)
    if not bootstrap and not args.command_config:
        raise ConfigurationError(
            "--bootstrap-servers",
            None,
            "the Kafka cluster to check and resolve the offsets on (a SQL store has none)",
            "Pass --bootstrap-servers HOST:PORT.",
        )
    settings = client_config(args, bootstrap=bootstrap)
    reader = AdminOffsetReader(KafkaConfig(settings), request_timeout_s=args.timeout)
    try:
        with as_file_keys(settings):
            targets = resolve_reset(reader, args.topic, args.to)
    finally:
        reader.close()
    ranges = [OffsetRange(tp.topic, tp.partition, off, off) for tp, off in sorted(targets.items())]
    security = _store_security(args)
    with as_file_keys(security), open_store(args.store, security) as store:
        store.save(args.group, ranges)
    shown = json.dumps({f"{tp}": off for tp, off in sorted(targets.items())})
    out.write(f"group '{args.group}' now at {shown}\n")
    return 0


def add_offsets_subcommand(sub: Any) -> None:
    offsets = sub.add_parser(
        "offsets",
        description="Show or reset a consumer group's stored offsets, in Kafka "
        "(kafka://HOST:PORT) or in a SQL store (sqlite:///PATH, postgresql://..., mysql://...).",
    )
    actions = offsets.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the group's stored next offsets")
    show.add_argument("--store", required=True, help="kafka://…, sqlite:///…, postgresql://…")
    show.add_argument("--group", required=True)
    add_command_config(show)
    show.set_defaults(func=_show)
    reset = actions.add_parser(
        "reset",
        help="move the group's stored offsets",
        description="Move a group's stored offsets. earliest/latest move every partition of the "
        "--topic topics; JSON moves the partitions it names, which must exist and belong to a "
        "--topic, to offsets within [earliest, log end] (-2 = earliest, -1 = latest). Offsets are "
        "resolved on --bootstrap-servers, which defaults to a kafka:// store's own cluster.",
    )
    reset.add_argument("--store", required=True)
    reset.add_argument("--group", required=True)
    reset.add_argument(
        "--bootstrap-servers",
        default=None,
        help="the cluster to check and resolve offsets on (default: a kafka:// store's address)",
    )
    add_command_config(reset)
    reset.add_argument("--topic", action="append", required=True)
    reset.add_argument("--to", required=True, help='earliest, latest, or JSON {"t": {"0": 42}}')
    reset.add_argument(
        "--timeout", type=positive_seconds, default=15.0, help="seconds per broker request"
    )
    reset.set_defaults(func=_reset)
