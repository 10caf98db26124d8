"""The ``offsets show|reset`` subcommands: look at and move a group's stored offsets. Runs in
the user's process.

The store is named by a URL:

- ``kafka://HOST:PORT[,HOST:PORT]``: the consumer group in Kafka (``__consumer_offsets``);
- ``sqlite:///path/to/offsets.db``;
- ``postgresql://user@host:5432/db``;
- ``mysql://user[:password]@host:3306/db``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit

from kafka_direct.errors import ConfigurationError
from kafka_direct.offset_store import OffsetStore
from kafka_direct.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    parse_offsets_option,
)

__all__ = ["add_offsets_subcommand", "open_store"]


def open_store(url: str) -> OffsetStore:
    """An :class:`OffsetStore` from a URL (see the module docstring)."""
    from kafka_direct.stores import KafkaGroupStore, SqlOffsetStore

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "kafka" and parts.netloc:
        return KafkaGroupStore({"bootstrap.servers": parts.netloc})
    if scheme == "sqlite" and parts.path:
        return SqlOffsetStore.sqlite(parts.path)
    if scheme in ("postgresql", "postgres"):
        return SqlOffsetStore.postgres(url)
    if scheme == "mysql" and parts.hostname and parts.path.strip("/"):
        return SqlOffsetStore.mysql(
            database=parts.path.strip("/"),
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
        )
    shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}"  # never echo a password
    raise ConfigurationError(
        "--store",
        shown,
        "kafka://HOST:PORT, sqlite:///PATH, postgresql://USER@HOST/DB or mysql://USER@HOST/DB",
    )


def _show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    with open_store(args.store) as store:
        offsets = store.load(args.group)
    if not offsets:
        out.write(f"group '{args.group}' has no stored offsets\n")
        return 0
    out.write(f"{'TOPIC':<30} {'PARTITION':>9} {'NEXT-OFFSET':>12}\n")
    for tp, off in sorted(offsets.items()):
        out.write(f"{tp.topic:<30} {tp.partition:>9} {off:>12}\n")
    return 0


def _targets(args: argparse.Namespace) -> PartitionOffsets:
    from kafka_direct.offset_reader import AdminOffsetReader
    from kafka_direct.options import KafkaConfig, Strategy

    reader = AdminOffsetReader(KafkaConfig({"bootstrap.servers": args.bootstrap_servers}))
    tps = reader.partitions(Strategy("subscribe", topics=tuple(args.topic)))
    if not tps:
        raise ConfigurationError("--topic", ",".join(args.topic), "existing topics")
    to = args.to.strip()
    if to.lower() == "earliest":
        return reader.earliest(tps)
    if to.lower() == "latest":
        return reader.latest(tps)
    wanted = parse_offsets_option(to, "--to")
    specials = {tp for tp, off in wanted.items() if off in (EARLIEST, LATEST)}
    earliest = reader.earliest(specials) if specials else {}
    latest = reader.latest(specials) if specials else {}
    return {
        tp: earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        for tp, off in wanted.items()
    }


def _reset(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    targets = _targets(args)
    ranges = [OffsetRange(tp.topic, tp.partition, off, off) for tp, off in sorted(targets.items())]
    with open_store(args.store) as store:
        store.save(args.group, ranges)
    shown = json.dumps({f"{tp}": off for tp, off in sorted(targets.items())})
    out.write(f"group '{args.group}' now at {shown}\n")
    return 0


def add_offsets_subcommand(sub: Any) -> None:
    offsets = sub.add_parser("offsets", help="show or reset a group's stored offsets")
    actions = offsets.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the group's stored next offsets")
    show.add_argument("--store", required=True, help="kafka://…, sqlite:///…, postgresql://…")
    show.add_argument("--group", required=True)
    show.set_defaults(func=_show)
    reset = actions.add_parser("reset", help="move the group's stored offsets")
    reset.add_argument("--store", required=True)
    reset.add_argument("--group", required=True)
    reset.add_argument("--bootstrap-servers", required=True, help="to resolve earliest/latest")
    reset.add_argument("--topic", action="append", required=True)
    reset.add_argument("--to", required=True, help='earliest, latest, or JSON {"t": {"0": 42}}')
    reset.set_defaults(func=_reset)
