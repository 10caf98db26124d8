"""The benchmark's configuration and command line. Runs in the benchmark process.

:class:`Config` holds every size and switch of a run; :meth:`Config.quick_mode` is the smoke
test's tiny run. :func:`parse_args` maps ``benchmarks/run.py``'s options onto it: an option left
out keeps the default of the mode (full or ``--quick``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

DEFAULT_ARROW_BATCH = 20_000  # the source option arrowBatchSize's default
# Optional phases: the writes (their rounds and their memory run), then the reads' phases.
PHASES = ("writes", "write_memory", "fixed", "many", "memory", "latency", "planning")
#: The modes of every round, in the table's order; ratios are to "raw". "raw_arrow" is the C
#: extension alone, no Spark; "batch_python" is the batch read with fastPath.enabled=false: what
#: the C fast path gains, measured in the same run.
MODES = ("raw", "raw_arrow", "batch", "batch_python", "stream", "stream_noop", "floor")
#: The write modes of every write round, in the table's order; ratios are to "raw" (a plain
#: producer loop with the sink's settings). See kafka_direct_bench.writes.
WRITE_MODES = ("raw", "raw_defaults", "native", "spark_floor", "batch", "batch_python", "stream")


@dataclass
class Config:
    records: int = 2_000_000
    size: int = 100
    partitions: int = 2
    bootstrap_servers: str | None = None
    rounds: int = 5
    micro_batches: int = 40
    latency_rate: int = 20_000
    latency_seconds: float = 20.0
    trigger_ms: int = 500
    planning_partitions: int = 100
    planning_triggers: int = 20
    arrow_batch_size: int = DEFAULT_ARROW_BATCH
    memory_arrow_batch_size: int = DEFAULT_ARROW_BATCH
    seed: int = 42
    quick: bool = False
    json_path: str | None = None
    skip: tuple[str, ...] = ()

    @classmethod
    def quick_mode(cls, **overrides: Any) -> Config:
        """Tiny sizes: seconds, for the smoke test. Correctness only; the rates mean little."""
        base = cls(
            records=20_000,
            rounds=1,
            micro_batches=4,
            latency_rate=2_000,
            latency_seconds=3.0,
            planning_partitions=100,
            planning_triggers=3,
            memory_arrow_batch_size=250,  # 10,000 records per task = 40 Arrow batches
            quick=True,
        )
        for key, value in overrides.items():
            setattr(base, key, value)
        return base


def parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(
        description="kafka_direct benchmarks: rates and ratios to raw librdkafka, in one run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = Config()
    p.add_argument("--records", type=int, help=f"records in the data set (default {d.records:,})")
    p.add_argument("--size", type=int, default=d.size, help="bytes per record value")
    p.add_argument("--partitions", type=int, default=d.partitions, help="partitions of the topic")
    p.add_argument(
        "--bootstrap-servers", help="use this cluster instead of starting the embedded broker"
    )
    p.add_argument("--rounds", type=int, help=f"interleaved raw/batch/stream rounds ({d.rounds})")
    p.add_argument(
        "--micro-batches",
        type=int,
        help=f"micro-batches of the maxOffsetsPerTrigger run ({d.micro_batches})",
    )
    p.add_argument("--latency-rate", type=int, help=f"records/s ({d.latency_rate:,})")
    p.add_argument("--latency-seconds", type=float, help=f"producer run time ({d.latency_seconds})")
    p.add_argument("--trigger-ms", type=int, default=d.trigger_ms, help="latency trigger interval")
    p.add_argument(
        "--planning-partitions", type=int, default=d.planning_partitions, help="planning topic size"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the data set")
    p.add_argument("--quick", action="store_true", help="tiny sizes, seconds (the smoke test)")
    p.add_argument("--json", dest="json_path", help="write all results to this JSON file")
    p.add_argument(
        "--skip",
        type=lambda text: tuple(x.strip() for x in text.split(",") if x.strip()),
        help=f"comma-separated phases to leave out: {', '.join(PHASES)}",
    )
    a = p.parse_args(argv)
    given = {
        k: v
        for k, v in vars(a).items()
        if v is not None and k not in ("quick",) and not (k == "json_path" and v is None)
    }
    config = Config.quick_mode(**given) if a.quick else Config(**given)
    unknown = set(config.skip) - set(PHASES)
    if unknown:
        p.error(f"--skip: unknown phase(s) {', '.join(sorted(unknown))}; phases: {PHASES}")
    if config.records < config.partitions:
        p.error("--records must be at least --partitions")
    return config
