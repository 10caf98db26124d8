"""The ``kafka-direct`` command line. Runs in the user's process (for ``wordcount``, the Spark
driver).

Subcommands:
  wordcount   the main job: a streaming word count on the embedded broker (or --bootstrap-servers)
  broker      run the embedded broker in the foreground
  produce     produce sample records, with a progress bar
  lag         consumer-group lag per partition, once or --watch
  offsets     show or reset a group's stored offsets (Kafka group or SQL store)
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kafka_direct.errors import KafkaDirectError

__all__ = ["main"]


def _wordcount(args: argparse.Namespace) -> int:
    from kafka_direct.broker import EmbeddedBroker
    from kafka_direct.wordcount import run_wordcount

    def run(bootstrap: str) -> int:
        result = run_wordcount(
            bootstrap, seconds=args.seconds, rate=args.rate, partitions=args.partitions
        )
        total = sum(result.produced.values())
        if result.exact:
            sys.stdout.write(
                f"Done: {result.batches} micro-batches, {total} words produced and counted; "
                "every word's count matches exactly.\n"
            )
            return 0
        missing = result.produced - result.counted
        extra = result.counted - result.produced
        sys.stdout.write(f"MISMATCH: missing {dict(missing)}, extra {dict(extra)}\n")
        return 1

    if args.bootstrap_servers:
        return run(args.bootstrap_servers)
    sys.stdout.write("Starting the embedded Kafka broker (Tansu)...\n")
    with EmbeddedBroker() as broker:
        return run(broker.bootstrap_servers)


def _broker(args: argparse.Namespace) -> int:
    from kafka_direct import broker

    argv = ["--host", args.host] + (["--port", str(args.port)] if args.port else [])
    return broker.main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafka-direct", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    wc = sub.add_parser("wordcount", help="streaming word count (the README's main job)")
    wc.add_argument("--bootstrap-servers", help="use this cluster instead of the embedded broker")
    wc.add_argument("--seconds", type=float, default=20.0, help="how long to produce (20)")
    wc.add_argument("--rate", type=int, default=200, help="lines per second to produce (200)")
    wc.add_argument("--partitions", type=int, default=2, help="partitions of the topic (2)")
    wc.set_defaults(func=_wordcount)

    br = sub.add_parser("broker", help="run the embedded broker in the foreground")
    br.add_argument("--host", default="127.0.0.1")
    br.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    br.set_defaults(func=_broker)

    from kafka_direct.cli_offsets import add_offsets_subcommand
    from kafka_direct.cli_tools import add_subcommands

    add_subcommands(sub)
    add_offsets_subcommand(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except KafkaDirectError as exc:
        # A library error is a message for the user, not a stack trace.
        sys.stderr.write(f"kafka-direct: {type(exc).__name__}: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
