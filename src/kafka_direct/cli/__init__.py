"""The ``kafka-direct`` command line. Runs in the user's process (for ``wordcount``, the Spark
driver).

Subcommands (listed for users in the parser's epilog, :data:`EPILOG`):
  wordcount   the main job: a streaming word count on the embedded broker (or --bootstrap-servers)
  broker      run the embedded broker (Apache Kafka, or Tansu) in the foreground
  produce     produce sample records, with a progress bar (:mod:`kafka_direct.cli.produce`)
  lag         consumer-group lag per partition, once or --watch (:mod:`kafka_direct.cli.lag`)
  offsets     show or reset a group's stored offsets (:mod:`kafka_direct.cli.offsets`)

One module per command group; :mod:`~kafka_direct.cli.common` holds what they share.

Every library error (:class:`~kafka_direct.errors.KafkaDirectError`) ends the command with one
line on stderr, ``kafka-direct: <error type>: <message>``, and exit status 2; Ctrl-C ends it with
one line and status 130.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from kafka_direct.cli.common import CLIENT_EVENTS_LOG, CLIENT_LOG, EXIT_INTERRUPTED
from kafka_direct.errors import ConfigurationError, KafkaDirectError

__all__ = ["main"]


def _broker(args: argparse.Namespace) -> int:
    if args.broker == "kafka":
        if args.port or args.host != "127.0.0.1":
            raise ConfigurationError(
                "--port/--host",
                f"{args.host}:{args.port}",
                "no address with --broker kafka (its nodes take free ports on 127.0.0.1)",
                "Drop --port and --host, or use --broker tansu.",
            )
        from kafka_direct.testing import kafka_cluster

        return kafka_cluster.main(["--brokers", "1"])
    from kafka_direct.testing import broker

    argv = ["--host", args.host] + (["--port", str(args.port)] if args.port else [])
    return broker.main(argv)


DESCRIPTION = (
    "Tools for kafka_direct: the word count demo, a local broker, sample data, lag and offsets."
)

EPILOG = """\
commands:
  wordcount  run the streaming word count (the README's main job) on the embedded broker
  broker     run the embedded broker (Apache Kafka, or --broker tansu) in the foreground
  produce    produce sample records to a topic, checking that every record is delivered
  lag        show a consumer group's lag per partition, once or every --watch seconds
  offsets    show or reset a group's stored offsets (Kafka group or SQL store)
  consume    print a topic's records, like kafka-console-consumer (what the sink wrote)

Run 'kafka-direct COMMAND --help' for the options of a command.

exit status: 0 done, 1 records not delivered or counts that differ, 2 an error (one line on
stderr), 130 interrupted.
"""

#: The exit status of a library error (argparse uses the same for a bad command line).
EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-direct",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO level, with librdkafka's log"
    )
    # The epilog lists the commands with a sentence each, so the subparsers get no help= of
    # their own (argparse would list them again); each has a description for COMMAND --help.
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="one of the commands below"
    )
    # Imported here: each loads the Kafka client, which 'kafka-direct --help' does not need.
    from kafka_direct.cli.consume import add_consume_subcommand
    from kafka_direct.cli.lag import add_lag_subcommand
    from kafka_direct.cli.offsets import add_offsets_subcommand
    from kafka_direct.cli.produce import add_produce_subcommand
    from kafka_direct.cli.wordcount import add_wordcount_subcommand

    add_wordcount_subcommand(sub)
    br = sub.add_parser(
        "broker",
        description="Run the embedded broker in the foreground until Ctrl-C: one Apache Kafka "
        "node (its jars fetched on the first run), or the in-memory Tansu broker. Prints "
        "KAFKA_BOOTSTRAP_SERVERS=host:port when it is ready.",
    )
    br.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    br.add_argument("--host", default="127.0.0.1")
    br.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    br.set_defaults(func=_broker)
    add_produce_subcommand(sub)
    add_lag_subcommand(sub)
    add_offsets_subcommand(sub)
    add_consume_subcommand(sub)
    return parser


def _own_ctrl_c() -> None:
    """Make Ctrl-C raise KeyboardInterrupt whatever SIGINT disposition was inherited.

    A process started with SIGINT ignored (a background job, nohup, some CI runners) keeps it
    ignored, and Python then installs no handler: Ctrl-C would never reach the command.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _own_ctrl_c()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # librdkafka repeats a connection error at every reconnect (dozens of lines a second); the
    # clients' error_cb reports each cause once and the final message names it, so the raw log
    # of the clients the CLI creates is for --verbose only.
    logging.getLogger(CLIENT_LOG).setLevel(logging.INFO if args.verbose else logging.CRITICAL)
    # Each client event is logged as a WARNING when first seen; a command that then fails names
    # the same cause in its one error line, so without --verbose they would only repeat it.
    logging.getLogger(CLIENT_EVENTS_LOG).setLevel(logging.INFO if args.verbose else logging.ERROR)
    try:
        return int(args.func(args))
    except KafkaDirectError as exc:
        # A library error is a message for the user, not a stack trace: one line.
        message = " ".join(str(exc).split("\n"))
        sys.stderr.write(f"kafka-direct: {type(exc).__name__}: {message}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        # Ctrl-C is how `lag --watch` (and a long produce) is meant to end: no traceback.
        # On a terminal the cursor sits after the echoed ^C: start a line of our own.
        start = "\n" if sys.stderr.isatty() else ""
        sys.stderr.write(f"{start}kafka-direct: interrupted\n")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
