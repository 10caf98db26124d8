"""Bytecode for the kafka_direct a benchmark runs, as pip writes it for an installed wheel. Runs
in the benchmark process, once, when this package is first imported.

Benchmarks import kafka_direct from a checkout's ``src/`` (this one's, or
``KAFKA_DIRECT_BENCH_SRC``'s), and Python compiles a module from source whenever no bytecode is
cached beside it. Where ``PYTHONDONTWRITEBYTECODE`` is set, as on this project's machines, none is
ever written, so every process Spark starts for a query (each planner, each stream runner) compiled
kafka_direct again: about 90 ms of a stream runner's start that a user's installed package never
pays, and that Spark's connector, loaded from jars, does not pay either (docs/performance.md,
"Query start"). Python reads bytecode it finds even with that variable set, so this writes it
once; the children inherit ``_DONE_ENV`` and skip the check.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_DONE_ENV = "KAFKA_DIRECT_BENCH_BYTECODE"


def compile_checkout() -> None:
    """Compile every module of the benchmarked ``src/`` and of ``benchmarks/`` that lacks fresh
    bytecode (quick when nothing changed: one ``stat`` per file)."""
    if os.environ.get(_DONE_ENV):
        return
    src = Path(os.environ.get("KAFKA_DIRECT_BENCH_SRC") or ROOT / "src")
    for tree in (src, ROOT / "benchmarks"):
        if tree.is_dir():
            compileall.compile_dir(str(tree), quiet=1)
    os.environ[_DONE_ENV] = "1"
