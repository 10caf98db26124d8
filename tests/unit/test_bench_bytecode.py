"""The benchmarks run kafka_direct from bytecode, as an installed wheel does: compile_checkout
writes it for the benchmarked src/ (KAFKA_DIRECT_BENCH_SRC's when set), even where
PYTHONDONTWRITEBYTECODE keeps Python from writing it, and only once per process tree."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from kafka_direct_bench import bytecode


def _tree(root: Path) -> Path:
    module = root / "pkg" / "mod.py"
    module.parent.mkdir(parents=True)
    (module.parent / "__init__.py").write_text("")
    module.write_text("VALUE = 1\n")
    return module


def _cached(module: Path) -> bool:
    return Path(importlib.util.cache_from_source(str(module))).exists()


@pytest.mark.parametrize(
    ("already_done", "compiled"),
    [
        (False, True),  # the benchmark process: compiles the benchmarked src/
        (True, False),  # a child of it (the variable inherited): no second pass
    ],
)
def test_the_benchmarked_src_gets_bytecode_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, already_done: bool, compiled: bool
) -> None:
    module = _tree(tmp_path / "src")
    monkeypatch.setenv("KAFKA_DIRECT_BENCH_SRC", str(tmp_path / "src"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    if already_done:
        monkeypatch.setenv(bytecode._DONE_ENV, "1")
    else:
        monkeypatch.delenv(bytecode._DONE_ENV, raising=False)

    bytecode.compile_checkout()

    assert _cached(module) is compiled
    # Whatever happened, the process tree below now skips the check.
    assert os.environ.get(bytecode._DONE_ENV) == "1"
