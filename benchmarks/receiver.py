#!/usr/bin/env python
"""Spark's two Kafka approaches, measured: the receiver stream or the direct stream?

    python benchmarks/receiver.py                  # 1,000,000 records x 100 B: a few minutes
    python benchmarks/receiver.py --quick          # 100,000 records
    python benchmarks/receiver.py --json out.json  # also every figure as JSON

It starts the embedded broker (or uses ``--bootstrap-servers``) and a local Spark with
``numReceivers + 2`` cores, then measures in one run: throughput of the direct stream, the
receiver stream with its write-ahead log and without it, on the same data, with raw librdkafka
as the ceiling; latency from record timestamp to the row in the batch function; repeats and
losses after the driver is SIGKILLed mid-stream and restarted; and what each needs. The
measurements live in ``kafka_direct_bench.receiver`` (and ``receiver_crash``, ``receiver_report``).

This file is the command, in the benchmark process (also the Spark driver); with ``--child SPEC``
it is one of the crash phase's child drivers instead.
"""

from __future__ import annotations

import sys

from kafka_direct_bench.common import log


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        from kafka_direct_bench.receiver_crash import child_main

        child_main(args[1])
        return 0
    from kafka_direct_bench.receiver import parse_args, run
    from kafka_direct_bench.receiver_crash import crash_phase
    from kafka_direct_bench.receiver_report import render

    config = parse_args(args)
    results = run(config, "python benchmarks/receiver.py " + " ".join(args), crash_phase)
    print(render(results), flush=True)
    if config.json_path:
        log(f"wrote {config.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
