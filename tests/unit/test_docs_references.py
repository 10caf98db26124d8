"""The docs name only what exists. Pure: reads the docs and the sources; starts no Spark, no broker.

Every page (README.md, docs/*.md, benchmarks/README.md) is scanned for what a reader would type
or look up, and each name must be real:

- a ``kafka_direct.x.y`` path in backticks, or in ``from kafka_direct.x import y``, resolves: its
  modules are found by ``importlib``'s path finder (nothing is imported), its last parts are
  defined in the module's source; a logger name (``kafka_direct.librdkafka``) counts if the
  sources name it;
- an option in an options table is one the config readers know (the source's, the sink's,
  the Schema Registry functions', the DStream API's keyword arguments); a table this test does
  not know fails until it is classified in :data:`OPTION_TABLES`;
- ``scripts/``, ``benchmarks/``, ``tests/``, ``examples/`` and ``src/`` paths exist, and a test
  named in backticks (``test_...``) is defined under ``tests/``;
- ``kafka-direct <command>`` is a subcommand of the CLI's parser, and its ``--flags`` are its own;
- ``python benchmarks/x.py --flag`` and ``python -m tests.x --flag``: the flag is declared by that
  script's argparse (its ``add_argument`` calls, and those of the benchmark modules it imports);
- a plain default in a source or sink options table is the reader's default, and docs/writing.md's
  table of the producers' settings is what ``producer_config`` sets.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from functools import cache
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks/README.md"]

_FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)
_SPAN = re.compile(r"`([^`]+)`")


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _snippets(page: Path) -> Iterator[str]:
    """Inline code spans (which may wrap a line) and the lines of fenced blocks."""
    text = page.read_text()
    for block in _FENCE.findall(text):
        yield from block.splitlines()[1:-1]
    yield from (" ".join(span.split()) for span in _SPAN.findall(_FENCE.sub("", text)))


# --- kafka_direct.x.y --------------------------------------------------------------------------


@cache
def _extension_modules() -> frozenset[str]:
    """C extensions setup.py declares: they resolve even before ``build_ext`` ran."""
    setup = (ROOT / "setup.py").read_text()
    return frozenset(re.findall(r"[\"'](kafka_direct\.[\w.]+)[\"']", setup))


@cache
def _source_literals() -> frozenset[str]:
    """Every dotted ``"kafka_direct..."`` string literal in the sources (logger names)."""
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        found.update(re.findall(r"[\"'](kafka_direct(?:\.\w+)+)[\"']", path.read_text()))
    return frozenset(found)


def _top_level_names(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            for part in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, part, []):
                    names |= _top_level_names(getattr(child, "body", [child]))
    return names


@cache
def _module_tree(origin: str) -> ast.Module:
    return ast.parse(Path(origin).read_text())


def _attribute_defined(spec: ModuleSpec, parts: list[str]) -> bool:
    """``parts`` (an attribute, then perhaps one of its own) are defined in the module's source."""
    origin = spec.origin or ""
    if not origin.endswith(".py"):
        stub = Path(origin).with_name(spec.name.rsplit(".", 1)[-1] + ".pyi")
        if not stub.exists():
            return spec.name in _extension_modules()
        origin = str(stub)
    tree = _module_tree(origin)
    if parts[0] not in _top_level_names(tree.body):
        return False
    if len(parts) == 1:
        return True
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == parts[0]:
            return parts[1] in _top_level_names(node.body)
    return True  # an attribute of something imported: the first part is enough


def resolves(dotted: str) -> bool:
    """Whether ``kafka_direct.x.y`` is a module, or an attribute defined in one, without
    importing anything (``PathFinder`` looks in the package's folders only)."""
    if dotted in _source_literals() or dotted in _extension_modules():
        return True
    parts = dotted.split(".")
    search = [str(SRC)]
    spec: ModuleSpec | None = None
    for i in range(len(parts)):
        found = PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if found is None:
            return spec is not None and _attribute_defined(spec, parts[i:])
        spec = found
        if not found.submodule_search_locations:
            rest = parts[i + 1 :]
            return not rest or _attribute_defined(spec, rest)
        search = list(found.submodule_search_locations)
    return spec is not None


_DOTTED = re.compile(r"\bkafka_direct(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"from (kafka_direct(?:\.\w+)*) import \(?([\w ,]+)")


def module_references() -> Iterator[tuple[str, str]]:
    for page in PAGES:
        for snippet in _snippets(page):
            for match in _DOTTED.finditer(snippet):
                yield _page_id(page), match.group(0)
            for match in _FROM_IMPORT.finditer(snippet):
                for name in match.group(2).split(","):
                    if name.strip():
                        yield _page_id(page), f"{match.group(1)}.{name.split()[0]}"


def test_module_resolution_itself() -> None:
    assert resolves("kafka_direct.testing.KafkaCluster")
    assert resolves("kafka_direct.errors.KafkaDirectError")
    assert resolves("kafka_direct.librdkafka")  # a logger the sources name
    assert not resolves("kafka_direct.testing.KafkaClusterz")
    assert not resolves("kafka_direct.nosuchmodule")
    assert not resolves("kafka_direct.errors.KafkaDirectError.no_such_member")


@pytest.mark.parametrize(("page", "dotted"), sorted(set(module_references())))
def test_module_paths_resolve(page: str, dotted: str) -> None:
    assert resolves(dotted), f"{page} names `{dotted}`: neither a module nor defined in one"


# --- option tables -----------------------------------------------------------------------------


def _source_options() -> set[str]:
    from kafka_direct.config.defaults import OPTION_DEFAULTS
    from kafka_direct.config.value_format import VALUE_FORMAT_DEFAULTS
    from kafka_direct.schema_registry.options import KNOWN_OPTIONS

    registry = {o for o in KNOWN_OPTIONS if o.startswith("confluent.schema.registry.")}
    return {*OPTION_DEFAULTS, *VALUE_FORMAT_DEFAULTS, *registry, "confluent.schema.registry.*"}


def _sink_options() -> set[str]:
    from kafka_direct.config.sink import SINK_OPTION_DEFAULTS

    return set(SINK_OPTION_DEFAULTS)


def _registry_function_options() -> set[str]:
    from kafka_direct.schema_registry.options import KNOWN_OPTIONS

    return set(KNOWN_OPTIONS)


def _keyword_arguments(function: str) -> set[str]:
    """The parameters of ``KafkaUtils.<function>``, read from its source."""
    tree = ast.parse((SRC / "kafka_direct/dstream/kafka_utils.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            args = node.args
            return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    raise AssertionError(f"KafkaUtils.{function} is gone from dstream/kafka_utils.py")


def _stream_source_options() -> set[str]:
    from kafka_direct.config.dstream import _PASS_THROUGH

    return set(_PASS_THROUGH.values())


#: Every options table of the docs: (page, the heading it sits under, the reader that knows its
#: names). ``kafka.*`` names are librdkafka's and pass wherever the reader takes them.
OPTION_TABLES: list[tuple[str, str, str]] = [
    ("docs/reading.md", "Options", "source"),
    ("docs/offsets.md", "Consumer groups: commits, starting from them, lag", "source"),
    (
        "docs/performance-partitions.md",
        "Planning (driver): `kafka_direct.planning.packing`",
        "source",
    ),
    ("docs/schema-registry.md", "Options", "registry functions"),
    ("docs/schema-registry.md", "Decoding in the source: `valueFormat`", "source"),
    ("docs/writing.md", "Options", "sink"),
    ("docs/exactly-once.md", "Options", "sink"),
    ("docs/dstream.md", "Arguments", "createDirectStream"),
    ("docs/dstream.md", "Arguments", "createStream"),
    ("docs/queues.md", "Settings", "createShareStream"),
]

KNOWN = {
    "source": _source_options,
    "sink": _sink_options,
    "registry functions": _registry_function_options,
    "createDirectStream": lambda: _keyword_arguments("createDirectStream"),
    "createStream": lambda: _keyword_arguments("createStream"),
    "createShareStream": lambda: _keyword_arguments("createShareStream"),
}
TAKES_KAFKA = {"source", "sink"}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def option_tables(page: Path) -> Iterator[tuple[str, list[list[str]]]]:
    """(heading, rows) of every table whose first column is ``option`` or ``argument``."""
    heading, lines = "", page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("#").strip()
        cells = _cells(lines[i]) if lines[i].startswith("|") else []
        if cells and cells[0].lower() in ("option", "argument"):
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            yield heading, rows
            continue
        i += 1


def names_in_cell(cell: str) -> list[str]:
    """`a`, `b` → a, b; `prefix.x.y`, `...y2` → prefix.x.y, prefix.x.y2; `a.b`, `.c` → a.b, a.c."""
    names: list[str] = []
    for name in re.findall(r"`([^`]+)`", cell):
        if name.startswith(".") and not name.startswith("...") and names:
            name = names[0].rsplit(".", 1)[0] + name  # `a.b.c`, `.d` -> a.b.d
        elif name.startswith("...") and names:
            tail = name[3:]
            first = names[0]
            cut = first.find(tail.split(".")[0] + ".")
            name = first[:cut] + tail if cut > 0 else name
        names.append(name)
    return names


def _known(name: str, known: set[str], kind: str) -> bool:
    lowered = {k.lower() for k in known}
    if name.lower() in lowered:
        return True
    if kind in TAKES_KAFKA and name.startswith("kafka."):
        return True
    if name.endswith(".*"):  # a family: some known name starts with it
        return any(k.startswith(name[:-1].lower()) for k in lowered)
    return False


def option_rows() -> Iterator[tuple[str, str, str, str]]:
    """(page, heading, reader, name) of every option named in every options table."""
    seen: dict[tuple[str, str], int] = {}
    for page in PAGES:
        for heading, rows in option_tables(page):
            page_id = _page_id(page)
            kinds = [k for p, h, k in OPTION_TABLES if p == page_id and h == heading]
            index = seen.get((page_id, heading), 0)
            seen[(page_id, heading)] = index + 1
            if index >= len(kinds):
                yield page_id, heading, "unclassified", ""
                continue
            for row in rows:
                for name in names_in_cell(row[0]):
                    yield page_id, heading, kinds[index], name


def test_every_options_table_is_classified() -> None:
    unknown = {(p, h) for p, h, kind, _ in option_rows() if kind == "unclassified"}
    assert not unknown, f"options tables unknown here; add them to OPTION_TABLES: {unknown}"
    tables = {(p, h, k) for p, h, k, _ in option_rows()}
    missing = [t for t in OPTION_TABLES if t not in tables]
    assert not missing, f"OPTION_TABLES lists tables the docs no longer have: {missing}"


@pytest.mark.parametrize(
    ("page", "heading", "kind", "name"),
    sorted({r for r in option_rows() if r[2] != "unclassified"}),
)
def test_documented_options_exist(page: str, heading: str, kind: str, name: str) -> None:
    assert _known(name, KNOWN[kind](), kind), (
        f"{page} ({heading}) documents `{name}`, which the {kind} options do not know"
    )


def test_the_direct_streams_source_options_are_those_it_passes_on() -> None:
    """dstream.md's `sourceOptions` row lists exactly what createDirectStream passes on."""
    for _heading, rows in option_tables(ROOT / "docs/dstream.md"):
        for row in rows:
            if names_in_cell(row[0]) == ["sourceOptions"]:
                listed = names_in_cell(row[2])
                allowed = _stream_source_options()
                wrong = [n for n in listed if not _known(n, allowed, "")]
                assert not wrong, f"docs/dstream.md: sourceOptions does not take {wrong}"
                covered = {a for a in allowed for n in listed if _known(n, {a}, "")}
                assert covered == allowed, (
                    f"docs/dstream.md: sourceOptions also takes {sorted(allowed - covered)}"
                )
                return
    raise AssertionError("docs/dstream.md has no sourceOptions row")


# --- paths and tests ---------------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w/.])((?:scripts|benchmarks|tests|examples|src)/[\w./-]*[\w/])(::\w+)?")
_TEST_NAME = re.compile(r"^(test_\w+)$")


@cache
def _test_functions() -> frozenset[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.add(path.stem)
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    return frozenset(names)


def path_references() -> Iterator[tuple[str, str]]:
    for page in PAGES:
        for snippet in _snippets(page):
            for match in _PATH.finditer(snippet):
                yield _page_id(page), match.group(0)
            name = _TEST_NAME.match(snippet.strip())
            if name:
                yield _page_id(page), "::" + name.group(1)


@pytest.mark.parametrize(("page", "reference"), sorted(set(path_references())))
def test_paths_and_tests_exist(page: str, reference: str) -> None:
    path, _, test = reference.partition("::")
    if path:
        assert (ROOT / path).exists(), f"{page} names `{path}`, which the repository does not have"
    if test:
        assert test in _test_functions(), f"{page} names the test `{test}`, which tests/ lacks"


# --- commands ----------------------------------------------------------------------------------

#: A command line: ``kafka-direct`` first in its span or line (after a prompt or variables).
_CLI = re.compile(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*kafka-direct\s+([a-z][\w-]*)([^|;#`]*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


@cache
def _cli_commands() -> dict[str, set[str]]:
    from kafka_direct.cli import build_parser

    commands: dict[str, set[str]] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    full = f"{prefix} {name}".strip()
                    commands[full] = {o for a in sub._actions for o in a.option_strings}
                    walk(sub, full)

    walk(build_parser(), "")
    return commands


def cli_references() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    for page in PAGES:
        for snippet in _snippets(page):
            for match in _CLI.finditer(snippet):
                rest = match.group(2)
                action = re.match(r"\s*([a-z]+)\b", rest)
                command = match.group(1)
                if action and f"{command} {action.group(1)}" in _cli_commands():
                    command = f"{command} {action.group(1)}"
                yield _page_id(page), command, tuple(_FLAG.findall(rest))


@pytest.mark.parametrize(("page", "command", "flags"), sorted(set(cli_references())))
def test_cli_commands_and_flags_exist(page: str, command: str, flags: tuple[str, ...]) -> None:
    commands = _cli_commands()
    assert command in commands, (
        f"{page} names `kafka-direct {command}`; the subcommands are {sorted(commands)}"
    )
    unknown = [f for f in flags if f not in commands[command]]
    assert not unknown, f"{page}: `kafka-direct {command}` has no {unknown}"


_SCRIPT = re.compile(
    r"python3? (?:(benchmarks/[\w/]+\.py)|-m ((?:tests|benchmarks)(?:\.\w+)+))([^|;#`&>]*)"
)


def _declared_flags(path: Path, seen: set[Path]) -> set[str]:
    """``add_argument`` flags of a script, and of the benchmark modules it imports."""
    seen.add(path)
    tree = ast.parse(path.read_text())
    flags = {"--help", "-h"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            constants = [a.value for a in node.args if isinstance(a, ast.Constant)]
            flags.update(c for c in constants if str(c).startswith("-"))
        module_name = getattr(node, "module", None) or ""
        if isinstance(node, ast.ImportFrom) and module_name.startswith("kafka_direct_bench"):
            module = ROOT / "benchmarks" / module_name.replace(".", "/")
            for candidate in (module.with_suffix(".py"), module / "__init__.py"):
                if candidate.exists() and candidate not in seen:
                    flags |= _declared_flags(candidate, seen)
    return flags


def script_references() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    for page in PAGES:
        for snippet in _snippets(page):
            for match in _SCRIPT.finditer(snippet):
                script = match.group(1) or match.group(2).replace(".", "/") + ".py"
                flags = tuple(f.split("=")[0] for f in _FLAG.findall(match.group(3)))
                yield _page_id(page), script, flags


@pytest.mark.parametrize(("page", "script", "flags"), sorted(set(script_references())))
def test_script_flags_exist(page: str, script: str, flags: tuple[str, ...]) -> None:
    path = ROOT / script
    assert path.exists(), f"{page} runs `{script}`, which the repository does not have"
    unknown = [f for f in flags if f not in _declared_flags(path, set())]
    assert not unknown, f"{page}: `python {script}` declares no {unknown}"


# --- defaults ----------------------------------------------------------------------------------


def _defaults(kind: str) -> dict[str, str]:
    from kafka_direct.config.defaults import OPTION_DEFAULTS
    from kafka_direct.config.sink import SINK_OPTION_DEFAULTS
    from kafka_direct.config.value_format import VALUE_FORMAT_DEFAULTS

    table = {"source": {**OPTION_DEFAULTS, **VALUE_FORMAT_DEFAULTS}, "sink": SINK_OPTION_DEFAULTS}
    return {k.lower(): v for k, v in table.get(kind, {}).items()}


def default_rows() -> Iterator[tuple[str, str, str, str]]:
    """(page, option, documented default, the reader's default) where both are one plain value."""
    for page, heading, kind, name in sorted(
        {r for r in option_rows() if r[2] in ("source", "sink")}
    ):
        del heading
        for _heading, rows in option_tables(ROOT / page):
            for row in rows:
                if names_in_cell(row[0]) != [name] or len(row) < 2:
                    continue
                documented = row[1].strip().strip("`")
                actual = _defaults(kind).get(name.lower(), "")
                if actual and re.fullmatch(r"[\w.-]+", documented):
                    yield page, name, documented, actual


@pytest.mark.parametrize(("page", "name", "documented", "actual"), sorted(set(default_rows())))
def test_documented_defaults_are_the_readers(
    page: str, name: str, documented: str, actual: str
) -> None:
    assert documented.lower() == actual.lower(), (
        f"{page} gives `{name}` the default {documented!r}; the reader's is {actual!r}"
    )


def test_the_sinks_producer_settings_table_is_producer_config() -> None:
    """docs/writing.md's table of the producers' settings is what ``producer_config`` sets."""
    from kafka_direct.config.clients import producer_config

    actual = producer_config({})
    text = (ROOT / "docs/writing.md").read_text()
    table = text[text.index("| setting | value | why |") :].split("\n\n")[0].splitlines()[2:]
    assert table, "docs/writing.md: the producers' settings table is gone"
    for line in table:
        cells = _cells(line)
        names = names_in_cell(cells[0])
        values = [v.strip() for v in cells[1].split(",")]
        assert len(names) == len(values), line
        for name, value in zip(names, values, strict=True):
            assert actual.get(name) == value, (
                f"docs/writing.md says the sink's producers set {name}={value}; "
                f"producer_config sets {actual.get(name)!r}"
            )
