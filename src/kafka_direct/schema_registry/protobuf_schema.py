"""Protobuf schemas from the registry → descriptors and Spark types. Runs in the Spark driver
(the reader message and the result type, while planning) and in the Python workers (writer
descriptors by schema id, inside the Arrow UDFs of ``from_protobuf`` / ``to_protobuf``).

A registry holds a Protobuf schema either as ``.proto`` text (Java's serializer) or as a base64
``FileDescriptorProto`` (confluent-kafka-python's); text is compiled with ``grpcio-tools``'
protoc. A file that imports another registered file carries a *reference* to it (``name`` is
the import path; see :mod:`.references`): the referenced files are resolved recursively, each
subject version fetched once per worker, and put in the file's descriptor pool before it.
Imports of Google's well-known types need no reference. A file is built once per schema id
per worker.

Types follow spark-protobuf's ``SchemaConverters``: int32/sint32/sfixed32/uint32/fixed32 →
int, the 64-bit ones → bigint, float, double, bool → boolean, string, bytes → binary, enum →
string (its name), message → struct, repeated → array, map → map,
``google.protobuf.Timestamp`` → timestamp. Every field is nullable.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.client import RegisteredSchema, RegistryClient
from kafka_direct.schema_registry.errors import WireFormatError
from kafka_direct.schema_registry.options import RegistryOptions
from kafka_direct.schema_registry.references import cached_fetch, resolve

__all__ = [
    "TIMESTAMP",
    "cached_file",
    "file_descriptor",
    "message_descriptor",
    "registered_file",
    "repeated",
    "to_spark_type",
]

TIMESTAMP = "google.protobuf.Timestamp"
_MAIN = "schema.proto"
_WELL_KNOWN = "google/protobuf/"
_lock = threading.Lock()
_files_by_id: dict[tuple[str, int], Any] = {}


def _well_known(name: str) -> Any:
    """The ``FileDescriptorProto`` of one of Google's well-known types, by import path."""
    from google.protobuf import descriptor_pb2

    module = name.removeprefix(_WELL_KNOWN).removesuffix(".proto")
    serialized = importlib.import_module(f"google.protobuf.{module}_pb2").DESCRIPTOR.serialized_pb
    return descriptor_pb2.FileDescriptorProto.FromString(serialized)


def _compile(text: str, name: str, imported: Sequence[Any]) -> Any:
    """A ``FileDescriptorProto`` for ``.proto`` text, with grpcio-tools' protoc; ``imported``:
    the already built files it may import (given to protoc as a descriptor set)."""
    from google.protobuf import descriptor_pb2

    try:
        import grpc_tools
    except ImportError:
        raise ConfigurationError(
            "schema.registry.subject",
            None,
            "the 'grpcio-tools' package, to compile a Protobuf schema stored as .proto text",
            "Install it with: pip install grpcio-tools.",
        ) from None
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "src")
        path = os.path.join(source, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write(text)
        target = os.path.join(scratch, "out.pb")
        command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{source}", f"-I{include}"]
        if imported:
            known = {proto.name for proto in imported}
            wanted = {d for p in imported for d in p.dependency if d not in known}
            files = descriptor_pb2.FileDescriptorSet()
            files.file.extend(_well_known(d) for d in sorted(wanted) if d.startswith(_WELL_KNOWN))
            files.file.extend(imported)
            imports = os.path.join(scratch, "imports.pb")
            with open(imports, "wb") as out:
                out.write(files.SerializeToString())
            command.append(f"--descriptor_set_in={imports}")
        command += [f"--descriptor_set_out={target}", name]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=60, check=False, cwd=scratch
        )
        if result.returncode != 0:
            raise WireFormatError(f"The Protobuf schema does not compile: {result.stderr.strip()}")
        with open(target, "rb") as compiled:
            return descriptor_pb2.FileDescriptorSet.FromString(compiled.read()).file[0]


def _file_proto(schema: str, name: str, imported: Sequence[Any]) -> Any:
    """A registry schema (text or base64) as a ``FileDescriptorProto`` called ``name``."""
    from google.protobuf import descriptor_pb2

    text = schema.strip()
    if any(c.isspace() for c in text) or ";" in text:
        return _compile(schema, name, imported)
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise WireFormatError(
            f"A Protobuf schema is neither .proto text nor a base64 descriptor: {exc}"
        ) from None
    if name != _MAIN:
        proto.name = name  # the import path its users know it by
    return proto


def file_descriptor(schema: str, dependencies: Sequence[tuple[str, str]] = ()) -> Any:
    """The ``FileDescriptor`` of a registry's Protobuf schema (text or base64), in a pool of its
    own with Google's well-known types and ``dependencies``: ``(import path, schema)`` of each
    referenced file, each after the files it imports."""
    from google.protobuf import descriptor_pool

    built: list[Any] = []
    for name, text in dependencies:
        built.append(_file_proto(text, name, built))
    main = _file_proto(schema, _MAIN, built)
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    by_name = {proto.name: proto for proto in built}

    def add(proto: Any) -> None:
        for dependency in proto.dependency:
            if dependency in added:
                continue
            if dependency in by_name:
                add(by_name[dependency])
            elif dependency.startswith(_WELL_KNOWN):
                add(_well_known(dependency))
            else:
                raise ConfigurationError(
                    "schema.registry.subject",
                    dependency,
                    "a schema reference for each imported Protobuf file (other than Google's "
                    "well-known types)",
                    "Register the schema with a reference named as the import, as "
                    "confluent-kafka's ProtobufSerializer does.",
                )
        if proto.name not in added:
            pool.AddSerializedFile(proto.SerializeToString())
            added.add(proto.name)

    add(main)
    return pool.FindFileByName(main.name)


def registered_file(registry: RegistryOptions, registered: RegisteredSchema) -> Any:
    """The file descriptor of a registered schema, its references resolved recursively."""
    if registered.schema_type.upper() != "PROTOBUF":
        raise WireFormatError(
            f"Schema id {registered.schema_id} is a {registered.schema_type} schema, not Protobuf."
        )
    resolved = resolve(registered.references, cached_fetch(RegistryClient(registry)))
    return file_descriptor(
        registered.schema, [(reference.name, found.schema) for reference, found in resolved]
    )


def cached_file(registry: RegistryOptions, schema_id: int) -> Any:
    """The file descriptor of schema ``schema_id``: fetched and built once per worker."""
    key = (registry.url, schema_id)
    with _lock:
        found = _files_by_id.get(key)
    if found is None:
        found = registered_file(registry, RegistryClient(registry).schema_by_id(schema_id))
        with _lock:
            _files_by_id[key] = found
    return found


def message_descriptor(file: Any, indexes: list[int] | None = None, name: str | None = None) -> Any:
    """The message at ``indexes`` in ``file``, or the one called ``name``, or the first.
    ``ValueError`` for indexes that name no message (a record's header: bad data, not a bad
    option), as Confluent's deserializers refuse them; a negative one is not counted from the
    end as Python's lists would."""
    if name is not None:
        full = name if "." in name or not file.package else f"{file.package}.{name}"
        return file.pool.FindMessageTypeByName(full)
    messages = list(file.message_types_by_name.values())
    if not messages:
        raise ConfigurationError("messageName", name, "a Protobuf schema with a message type")
    path = indexes or [0]
    current = None
    for depth, index in enumerate(path):
        choices = messages if current is None else list(current.nested_types)
        if not 0 <= index < len(choices):
            where = "the schema" if current is None else f"message {current.full_name}"
            raise ValueError(
                f"Protobuf message indexes {path} name no message: index {index} at depth "
                f"{depth} is outside the {len(choices)} message(s) of {where}"
            )
        current = choices[index]
    return current


def to_spark_type(message: Any, stack: tuple[str, ...] = ()) -> Any:
    """Spark's JSON form of the struct for a message descriptor (spark-protobuf's mapping)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.full_name == TIMESTAMP:
        return "timestamp"
    if message.full_name in stack:
        raise ConfigurationError(
            "messageName",
            message.full_name,
            "a non-recursive Protobuf message: Spark cannot hold a recursive type",
        )
    scalars = {
        F.TYPE_INT32: "integer",
        F.TYPE_SINT32: "integer",
        F.TYPE_SFIXED32: "integer",
        F.TYPE_UINT32: "integer",
        F.TYPE_FIXED32: "integer",
        F.TYPE_INT64: "long",
        F.TYPE_SINT64: "long",
        F.TYPE_SFIXED64: "long",
        F.TYPE_UINT64: "long",
        F.TYPE_FIXED64: "long",
        F.TYPE_FLOAT: "float",
        F.TYPE_DOUBLE: "double",
        F.TYPE_BOOL: "boolean",
        F.TYPE_STRING: "string",
        F.TYPE_BYTES: "binary",
        F.TYPE_ENUM: "string",
    }

    def field_type(field: Any) -> Any:
        if field.type == F.TYPE_MESSAGE:
            return to_spark_type(field.message_type, (*stack, message.full_name))
        return scalars[field.type]

    fields = []
    for field in message.fields:
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            key, value = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            spark: Any = {
                "type": "map",
                "keyType": field_type(key),
                "valueType": field_type(value),
                "valueContainsNull": True,
            }
        elif repeated(field):
            spark = {"type": "array", "elementType": field_type(field), "containsNull": False}
        else:
            spark = field_type(field)
        fields.append({"name": field.name, "type": spark, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED
