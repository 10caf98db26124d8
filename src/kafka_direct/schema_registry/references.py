"""Schema references: a registered schema that names types registered under other subjects.
Runs in the Spark driver (the reader schema, while planning) and in the Python workers (writer
schemas by id, inside the Arrow UDFs).

A registry schema may carry ``references``, ``[{name, subject, version}]``: a Protobuf file that
``import``\\ s ``name`` (confluent-kafka's ``ProtobufSerializer`` registers every imported file
that way), an Avro schema using a named type defined in ``subject``, a JSON Schema whose
``$ref`` is ``name``. A referenced schema may carry references of its own.

:func:`resolve` walks them (each subject version once, dependencies before the schemas that use
them); :func:`cached_fetch` fetches each subject version once per worker, as schemas are cached
by id: a registered version never changes. :func:`inline_avro` turns an Avro schema and its
referenced schemas into one self-contained schema, which fastavro and the C decoder read as any
other; :func:`inline_json_schema` does the same for a JSON Schema (the referenced documents go
under its ``$defs``, their ``$ref``\\ s rewritten to point there). The walk and the inlining are
pure; the registry is behind a ``fetch`` function.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kafka_direct.schema_registry.client import RegisteredSchema, RegistryClient, SchemaReference
from kafka_direct.schema_registry.errors import WireFormatError

__all__ = [
    "Fetch",
    "SchemaReference",
    "avro_schema",
    "cached_fetch",
    "clear_cache",
    "inline_avro",
    "inline_json_schema",
    "json_schema",
    "resolve",
]

#: ``fetch(subject, version)``: the registered schema, with its own references.
Fetch = Callable[[str, int], RegisteredSchema]

_lock = threading.Lock()
_versions: dict[tuple[str, str, int], RegisteredSchema] = {}
_resolved: dict[tuple[str, str, int], str] = {}  # (url, format, schema id) -> self-contained

_AVRO_PRIMITIVES = frozenset(
    ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
)
_AVRO_NAMED = ("record", "error", "enum", "fixed")


def clear_cache() -> None:
    """Forget every cached subject version (for tests)."""
    with _lock:
        _versions.clear()
        _resolved.clear()


def _once(client: RegistryClient, kind: str, registered: RegisteredSchema, build: Any) -> str:
    """``build()``'s text for this schema id, made once per worker (ids never change)."""
    key = (client.options.url, kind, registered.schema_id)
    with _lock:
        found = _resolved.get(key)
    if found is None:
        found = build()
        with _lock:
            _resolved[key] = found
    return found


def cached_fetch(client: RegistryClient) -> Fetch:
    """A :data:`Fetch` for this registry, cached per worker process."""
    url = client.options.url

    def fetch(subject: str, version: int) -> RegisteredSchema:
        key = (url, subject, version)
        with _lock:
            found = _versions.get(key)
        if found is None:
            found = client.subject_version(subject, version)
            with _lock:
                _versions[key] = found
        return found

    return fetch


def resolve(
    references: Sequence[SchemaReference], fetch: Fetch
) -> list[tuple[SchemaReference, RegisteredSchema]]:
    """Every schema that ``references`` reach, directly or through the references of referenced
    schemas: each subject version once, each after the schemas it references."""
    done: dict[tuple[str, int], RegisteredSchema] = {}
    ordered: list[tuple[SchemaReference, RegisteredSchema]] = []

    def visit(reference: SchemaReference, path: tuple[tuple[str, int], ...]) -> None:
        key = (reference.subject, reference.version)
        if key in done:
            return
        if key in path:
            cycle = " -> ".join(f"{s} v{v}" for s, v in (*path, key))
            raise WireFormatError(f"The schema references form a cycle: {cycle}.")
        found = fetch(reference.subject, reference.version)
        for inner in found.references:
            visit(inner, (*path, key))
        done[key] = found
        ordered.append((reference, found))

    for reference in references:
        visit(reference, ())
    return ordered


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _named_types(schema: Any, namespace: str | None, out: dict[str, Any]) -> None:
    """Collect every named type an Avro schema defines, by full name, with the namespace its
    definition sits in (so that it can be moved elsewhere unchanged in meaning)."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, out)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in _AVRO_NAMED and isinstance(schema.get("name"), str):
        name = schema["name"]
        space = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = _full_name(name, space)
        out.setdefault(full, _absolute(schema, full))
        for field in schema.get("fields", ()) if kind in ("record", "error") else ():
            _named_types(field.get("type"), space, out)
        return
    if isinstance(kind, (dict, list)):
        _named_types(kind, namespace, out)
    for key in ("items", "values"):
        if key in schema:
            _named_types(schema[key], namespace, out)


def _absolute(schema: dict[str, Any], full: str) -> dict[str, Any]:
    """The definition named by its full name, so it means the same wherever it is inlined (an
    empty namespace stops it from taking the namespace around it)."""
    out = dict(schema)
    if "." in full:
        out["name"] = full
        out.pop("namespace", None)
    else:
        out["name"], out["namespace"] = full, ""
    return out


def inline_avro(schema: Any, referenced: Sequence[Any]) -> Any:
    """One self-contained Avro schema: ``schema`` with each use of a named type that one of the
    ``referenced`` schemas defines replaced by that definition, at its first use."""
    defined: dict[str, Any] = {}
    for other in referenced:
        _named_types(other, None, defined)
    emitted: set[str] = set()

    def walk(node: Any, namespace: str | None) -> Any:
        if isinstance(node, str):
            if node in _AVRO_PRIMITIVES:
                return node
            full = _full_name(node, namespace)
            if full not in emitted and full in defined:
                return walk(defined[full], namespace)
            if full not in emitted and node in defined:  # a full name without dots
                return walk(defined[node], namespace)
            return node
        if isinstance(node, list):
            return [walk(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        out = dict(node)
        if kind in _AVRO_NAMED and isinstance(node.get("name"), str):
            name = node["name"]
            space = node.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
            full = _full_name(name, space)
            if full in emitted:  # defined already (inlined before this definition): refer
                return full if "." in full else name
            emitted.add(full)
            if kind in ("record", "error"):
                out["fields"] = [
                    {**field, "type": walk(field.get("type"), space)}
                    for field in node.get("fields", ())
                ]
            return out
        if isinstance(kind, (dict, list)) or (
            isinstance(kind, str) and kind not in (*_AVRO_NAMED, "array", "map")
        ):
            out["type"] = walk(kind, namespace)  # {"type": "SomeNamedType"} or a nested type
        if "items" in node:
            out["items"] = walk(node["items"], namespace)
        if "values" in node:
            out["values"] = walk(node["values"], namespace)
        return out

    return walk(schema, None)


def avro_schema(client: RegistryClient, registered: RegisteredSchema) -> str:
    """A registered Avro schema's text, self-contained: its references resolved and inlined
    (the text unchanged when it has none)."""
    if not registered.references:
        return registered.schema

    def build() -> str:
        resolved = resolve(registered.references, cached_fetch(client))
        try:
            referenced = [json.loads(found.schema) for _, found in resolved]
            inlined = inline_avro(json.loads(registered.schema), referenced)
        except ValueError as exc:
            raise WireFormatError(
                f"An Avro schema referenced by schema id {registered.schema_id} is not JSON: {exc}"
            ) from None
        return json.dumps(inlined, separators=(",", ":"))

    return _once(client, "AVRO", registered, build)


_JSON_KEY = "kafka_direct_reference_"


def inline_json_schema(schema: Any, documents: Sequence[tuple[str, Any]]) -> Any:
    """One self-contained JSON Schema: each ``(name, document)`` referenced (a ``$ref`` of
    ``name`` or ``name#/pointer``, as confluent-kafka resolves them) is put under the root's
    ``$defs`` and every ``$ref`` to it, in the schema or in another document, points there."""
    keys = {name: f"{_JSON_KEY}{index}" for index, (name, _) in enumerate(documents)}

    def rewrite(node: Any, own: str | None) -> Any:
        if isinstance(node, list):
            return [rewrite(item, own) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: rewrite(value, own) for key, value in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str):
            document, _, pointer = ref.partition("#")
            if document in keys:
                out["$ref"] = f"#/$defs/{keys[document]}{pointer}"
            elif not document and own is not None:  # within a referenced document
                out["$ref"] = f"#/$defs/{own}{pointer}"
        return out

    if not documents or not isinstance(schema, dict):
        return schema
    root = rewrite(schema, None)
    definitions = dict(root.get("$defs") or {})
    for name, document in documents:
        definitions[keys[name]] = rewrite(document, keys[name])
    root["$defs"] = definitions
    return root


def json_schema(client: RegistryClient, registered: RegisteredSchema) -> str:
    """A registered JSON Schema's text, self-contained: its references resolved and put under
    its ``$defs`` (the text unchanged when it has none)."""
    if not registered.references:
        return registered.schema

    def build() -> str:
        resolved = resolve(registered.references, cached_fetch(client))
        try:
            documents = [(ref.name, json.loads(found.schema)) for ref, found in resolved]
            inlined = inline_json_schema(json.loads(registered.schema), documents)
        except ValueError as exc:
            raise WireFormatError(
                f"A JSON Schema referenced by schema id {registered.schema_id} is not JSON: {exc}"
            ) from None
        return json.dumps(inlined, separators=(",", ":"))

    return _once(client, "JSON", registered, build)
