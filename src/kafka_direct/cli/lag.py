"""The ``lag`` subcommand: a consumer group's lag per partition, once or every ``--watch``
seconds. Runs in the user's process.

It prints the ``kafka-consumer-groups --describe`` view (CURRENT-OFFSET,
LOG-END-OFFSET, LAG per partition). On a terminal, ``--watch`` redraws one table in place under
the time it was taken; into a pipe, every table is printed under its timestamp.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TextIO

from kafka_direct.cli.common import (
    add_command_config,
    as_file_keys,
    client_config,
    positive_seconds,
    whole_number,
)
from kafka_direct.kafka.lag import LagRow, group_lag

__all__ = ["CLEAR_SCREEN", "add_lag_subcommand", "format_lag"]

#: ANSI: cursor to the top-left corner, then erase the whole screen.
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def format_lag(group: str, rows: Sequence[LagRow]) -> str:
    """A fixed-width table like ``kafka-consumer-groups --describe``."""
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
    lines = [header] + [
        (
            group,
            r.topic,
            str(r.partition),
            "-" if r.current_offset is None else str(r.current_offset),
            str(r.log_end_offset),
            "-" if r.lag is None else str(r.lag),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    total = sum(r.lag or 0 for r in rows)
    out.append(f"total lag: {total}" if rows else f"group '{group}' has no committed offsets")
    return "\n".join(out) + "\n"


def _now() -> str:
    """The local time, ISO 8601 to the second, with its UTC offset."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _lag(
    args: argparse.Namespace,
    out: TextIO | None = None,
    *,
    clock: Callable[[], str] = _now,
    sleep: Callable[[float], None] = time.sleep,
    lag_rows: Callable[..., list[LagRow]] = group_lag,
) -> int:
    out = out or sys.stdout
    kafka = client_config(args)
    # A terminal gets one table redrawn in place (like `watch`); a pipe or file gets every table,
    # each under its timestamp, so the output stays a readable log.
    redraw = bool(args.watch) and out.isatty()
    rounds = 0
    while True:
        with as_file_keys(kafka):
            rows = lag_rows(kafka, args.group, args.topic or None, timeout_s=args.timeout)
        table = format_lag(args.group, rows)
        if args.watch:
            header = f"{clock()}  group '{args.group}', every {args.watch:g} s (Ctrl-C to stop)"
            if redraw:
                out.write(f"{CLEAR_SCREEN}{header}\n\n{table}")
            else:
                separator = "\n" if rounds else ""
                out.write(f"{separator}{header}\n{table}")
        else:
            out.write(table)
        out.flush()
        rounds += 1
        if not args.watch or (args.count and rounds >= args.count):
            return 0
        sleep(args.watch)


def add_lag_subcommand(sub: Any) -> None:
    lag = sub.add_parser(
        "lag",
        description="Consumer-group lag per partition, like kafka-consumer-groups --describe. "
        "With --watch, a terminal shows one table redrawn in place; a pipe gets every table "
        "under its timestamp.",
    )
    lag.add_argument("--bootstrap-servers", required=True)
    add_command_config(lag)
    lag.add_argument("--group", required=True)
    lag.add_argument("--topic", action="append", help="also show partitions without a commit")
    lag.add_argument("--watch", type=positive_seconds, default=0, help="refresh every N seconds")
    lag.add_argument(
        "--count", type=whole_number, default=0, help="with --watch: stop after N tables"
    )
    lag.add_argument(
        "--timeout", type=positive_seconds, default=15.0, help="seconds per broker request"
    )
    lag.set_defaults(func=_lag)
