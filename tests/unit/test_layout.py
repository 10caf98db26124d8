"""The package's layout keeps its promises (see docs/architecture.md):

- the pure packages import neither Spark nor the Kafka client, so they can be unit-tested without
  either and run anywhere;
- no module imports itself back through others (no import circles, hidden function-level
  imports included);
- every module says, in its docstring, which process it runs in;
- the executor's two wings, ``consumer/`` (reads) and ``producer/`` (writes), are peers: neither
  imports the other; both stand on one floor (``executor/``: the lease pool and the Spark task;
  ``_native/``: the C extensions' loader; ``config/``), which imports neither wing;
- the paths the docs give import: ``kafka_direct.testing.broker`` (also
  ``python -m kafka_direct.testing.broker``), ``kafka_direct.testing.local``,
  ``kafka_direct.source.listener``, ``kafka_direct.consumer.native``; the one-line modules that
  kept the paths from before the layout (``kafka_direct.broker`` ...) are gone.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kafka_direct

PACKAGE = Path(kafka_direct.__file__).parent

#: Packages and modules that must stay free of pyspark and confluent_kafka.
PURE = [
    "kafka_direct.config",
    "kafka_direct.config.bounds",
    "kafka_direct.config.clients",
    "kafka_direct.config.defaults",
    "kafka_direct.config.dstream",
    "kafka_direct.config.fingerprint",
    "kafka_direct.config.kafka",
    "kafka_direct.config.reader",
    "kafka_direct.config.receiver",
    "kafka_direct.config.sink",
    "kafka_direct.config.source",
    "kafka_direct.config.value_format",
    "kafka_direct.dstream.receiver.control",
    "kafka_direct.dstream.receiver.policy",
    "kafka_direct.dstream.receiver.progress",
    "kafka_direct.dstream.receiver.wal",
    "kafka_direct.dstream.receiver.wal_log",
    "kafka_direct.dstream.strategies",
    "kafka_direct.errors",
    "kafka_direct.executor",
    "kafka_direct.executor.idle_reaper",
    "kafka_direct.executor.lease_pool",
    "kafka_direct.executor.process_local",
    "kafka_direct.executor.task",
    "kafka_direct.logs",
    "kafka_direct.offsets",
    "kafka_direct.planning.batch",
    "kafka_direct.planning.data_loss",
    "kafka_direct.planning.lookups",
    "kafka_direct.planning.micro_batch",
    "kafka_direct.planning.patience",
    "kafka_direct.planning.pid",
    "kafka_direct.planning.pushdown",
    "kafka_direct.planning.rates",
    "kafka_direct.planning.reader",
    "kafka_direct.planning.repair",
    "kafka_direct.planning.resolve",
    "kafka_direct.planning.splits",
    "kafka_direct.producer.columns",
    "kafka_direct.producer.markers",
    "kafka_direct.producer.partitioning",
    "kafka_direct.redaction",
    "kafka_direct.schema_registry.avro_defaults",
    "kafka_direct.schema_registry.avro_derive",
    "kafka_direct.schema_registry.avro_program",
    "kafka_direct.schema_registry.avro_types",
    "kafka_direct.schema_registry.errors",
    "kafka_direct.schema_registry.json_types",
    "kafka_direct.schema_registry.native_switch",
    "kafka_direct.schema_registry.options",
    "kafka_direct.schema_registry.wire",
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_worker_site" in path.parts:
            continue  # runs as `sitecustomize` in Spark's processes, not as part of the package
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def test_pure_modules_load_no_spark_and_no_kafka_client() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE)
        + "print(sorted(m for m in ('pyspark', 'confluent_kafka') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def _imports(name: str, path: Path) -> set[str]:
    """Every kafka_direct module ``name`` imports, at module level or inside functions."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES and m != name}


def test_no_import_circles() -> None:
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    # A package's __init__ importing its own modules is how a package exposes them, not a
    # circle: leave the edges from a package to its children out.
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert circles == []


#: The ground floor: every package stands on these, so they import only each other.
GROUND = {
    "kafka_direct.errors",
    "kafka_direct.logs",
    "kafka_direct.redaction",
}


@pytest.mark.parametrize("name", sorted(GROUND))
def test_the_ground_floor_imports_nothing_above_it(name: str) -> None:
    assert _imports(name, MODULES[name]) <= GROUND


@pytest.mark.parametrize(
    "name", sorted(m for m in MODULES if m.startswith("kafka_direct.executor"))
)
def test_the_executor_floor_stands_on_the_ground_only(name: str) -> None:
    """The lease pool and the Spark task know no Kafka client and no wing: only the ground
    floor, and each other."""
    above = {
        m
        for m in _imports(name, MODULES[name])
        if m not in GROUND and not m.startswith("kafka_direct.executor")
    }
    assert above == set()


WINGS = ("kafka_direct.consumer", "kafka_direct.producer")
#: What both wings stand on: nothing here may import a wing.
FLOOR = ("kafka_direct.executor", "kafka_direct._native", "kafka_direct.config")


def _in(name: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if name == p or name.startswith(p + ".")), None)


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _in(m, WINGS + FLOOR)))
def test_the_wings_are_peers_on_one_floor(name: str) -> None:
    own = _in(name, WINGS)
    wings = {_in(m, WINGS) for m in _imports(name, MODULES[name])} - {None, own}
    assert wings == set(), f"{name} imports {sorted(w for w in wings if w)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_names_its_process(name: str) -> None:
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split()) + " " + " ".join(doc.split())
    assert any(
        words in first
        for words in ("Runs in", "Pure", "Plain library", "plain library", "Run in", "runs in")
    ), f"{name}: its docstring does not say which process it runs in"


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("kafka_direct.testing.broker", ["EmbeddedBroker", "create_topic"]),
        ("kafka_direct.testing.demo", ["bootstrap_or_embedded", "describe"]),
        ("kafka_direct.testing.local", ["local_spark"]),
        ("kafka_direct.source.listener", ["LagListener", "LagReport"]),
        ("kafka_direct.consumer.native", ["status", "available"]),
        ("kafka_direct.producer.native", ["status", "available"]),
    ],
)
def test_documented_paths_import(path: str, names: list[str]) -> None:
    module = __import__(path, fromlist=names)
    for name in names:
        assert callable(getattr(module, name)), f"{path}.{name}"


@pytest.mark.parametrize("old", ["broker", "local", "listener", "native"])
def test_the_old_one_line_modules_are_gone(old: str) -> None:
    assert not (PACKAGE / f"{old}.py").exists()


def test_python_m_kafka_direct_testing_broker_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kafka_direct.testing.broker", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "embedded" in out.stdout
