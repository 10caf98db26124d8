"""Protobuf records in the Confluent wire format ⇄ Spark values. Runs in the Spark driver (the
result type, from the reader schema's descriptor) and in the Python workers (decoding and
encoding, inside the Arrow UDFs that ``from_protobuf`` / ``to_protobuf`` build).

A Protobuf record is ``0x00``, the 4-byte schema id, the *message indexes* (a zigzag varint
count, then that many zigzag varints: the path to the message type in the schema's file; a
single ``0`` byte means the first message), then the Protobuf bytes. A registry holds a schema
either as ``.proto`` text (Java's serializer) or as a base64 ``FileDescriptorProto``
(confluent-kafka-python's); text is compiled with ``grpcio-tools``' protoc, once per id per
worker. Schema references to other subjects are not supported; imports of Google's well-known
types are.

Types follow spark-protobuf's ``SchemaConverters``: int32/sint32/sfixed32/uint32/fixed32 →
int, the 64-bit ones → bigint, float, double, bool → boolean, string, bytes → binary, enum →
string (its name), message → struct, repeated → array, map → map,
``google.protobuf.Timestamp`` → timestamp. Every field is nullable and, as spark-protobuf
without ``emit.default.values``, a field left at its default is null.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import importlib
import io
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any, Literal

import pyarrow as pa

from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import SchemaNotFoundError, WireFormatError
from kafka_direct.schema_registry.options import RegistryOptions
from kafka_direct.schema_registry.wire import header, preview, split_header

__all__ = [
    "ProtobufDecoder",
    "ProtobufEncoder",
    "file_descriptor",
    "message_descriptor",
    "to_spark_type",
]

_TIMESTAMP = "google.protobuf.Timestamp"
_lock = threading.Lock()
_files_by_id: dict[tuple[str, int], Any] = {}


def _compile(text: str) -> Any:
    """A ``FileDescriptorProto`` for ``.proto`` text, with grpcio-tools' protoc."""
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
        with open(os.path.join(scratch, "schema.proto"), "w") as out:
            out.write(text)
        target = os.path.join(scratch, "out.pb")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{scratch}",
                f"-I{include}",
                f"--descriptor_set_out={target}",
                "schema.proto",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise WireFormatError(f"The Protobuf schema does not compile: {result.stderr.strip()}")
        with open(target, "rb") as compiled:
            files = descriptor_pb2.FileDescriptorSet.FromString(compiled.read())
    return files.file[0]


def file_descriptor(schema: str) -> Any:
    """The ``FileDescriptor`` of a registry's Protobuf schema (text or base64), in a pool of its
    own with Google's well-known types."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    text = schema.strip()
    if any(c.isspace() for c in text) or ";" in text:
        proto = _compile(schema)
    else:
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(text, validate=True)
            )
        except (binascii.Error, ValueError) as exc:
            raise WireFormatError(
                f"A Protobuf schema is neither .proto text nor a base64 descriptor: {exc}"
            ) from None
    pool = descriptor_pool.DescriptorPool()
    for dependency in proto.dependency:
        if not dependency.startswith("google/protobuf/"):
            raise ConfigurationError(
                "schema.registry.subject",
                dependency,
                "a Protobuf schema without references to other subjects",
                "Only imports of Google's well-known types are supported.",
            )
        name = dependency.removeprefix("google/protobuf/").removesuffix(".proto")
        module = importlib.import_module(f"google.protobuf.{name}_pb2")
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(proto.SerializeToString())
    return pool.FindFileByName(proto.name)


def message_descriptor(file: Any, indexes: list[int] | None = None, name: str | None = None) -> Any:
    """The message at ``indexes`` in ``file``, or the one called ``name``, or the first."""
    if name is not None:
        full = name if "." in name or not file.package else f"{file.package}.{name}"
        found = file.pool.FindMessageTypeByName(full)
        return found
    messages = list(file.message_types_by_name.values())
    if not messages:
        raise ConfigurationError("messageName", name, "a Protobuf schema with a message type")
    current = messages[(indexes or [0])[0]]
    for index in (indexes or [0])[1:]:
        current = current.nested_types[index]
    return current


def to_spark_type(message: Any, stack: tuple[str, ...] = ()) -> Any:
    """Spark's JSON form of the struct for a message descriptor (spark-protobuf's mapping)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.full_name == _TIMESTAMP:
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
        elif _repeated(field):
            spark = {"type": "array", "elementType": field_type(field), "containsNull": False}
        else:
            spark = field_type(field)
        fields.append({"name": field.name, "type": spark, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED


def _to_python(message: Any) -> Any:
    """A message as Spark values: set fields only (defaults are null), enums by name."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.DESCRIPTOR.full_name == _TIMESTAMP:
        return datetime.datetime.fromtimestamp(message.seconds, datetime.timezone.utc) + (
            datetime.timedelta(microseconds=message.nanos // 1000)
        )
    out: dict[str, Any] = {}
    for field, value in message.ListFields():

        def scalar(v: Any, f: Any = field) -> Any:
            if f.type == F.TYPE_MESSAGE:
                return _to_python(v)
            if f.type == F.TYPE_ENUM:
                found = f.enum_type.values_by_number.get(v)
                return found.name if found is not None else str(v)
            return v

        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: scalar(v, value_field) for k, v in value.items()}
        elif _repeated(field):
            out[field.name] = [scalar(v) for v in value]
        else:
            out[field.name] = scalar(value)
    return out


def _fill(message: Any, values: dict[str, Any]) -> None:
    """Set a message's fields from Spark values (the reverse of :func:`_to_python`)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.DESCRIPTOR.full_name == _TIMESTAMP:
        message.FromDatetime(values)
        return
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None or value is None:
            continue
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            target = getattr(message, name)
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items() if isinstance(value, dict) else value:
                if value_field.type == F.TYPE_MESSAGE:
                    _fill(target[k], v)
                else:
                    target[k] = _enum(value_field, v)
        elif _repeated(field):
            target = getattr(message, name)
            for v in value:
                if field.type == F.TYPE_MESSAGE:
                    _fill(target.add(), v)
                else:
                    target.append(_enum(field, v))
        elif field.type == F.TYPE_MESSAGE:
            _fill(getattr(message, name), value)
        else:
            setattr(message, name, _enum(field, value))


def _enum(field: Any, value: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_ENUM and isinstance(value, str):
        return field.enum_type.values_by_name[value].number
    return value


def _read_varint(stream: io.BytesIO) -> int:
    shift = result = 0
    while True:
        byte = stream.read(1)
        if not byte:
            raise WireFormatError("The record ends inside its Protobuf message indexes.")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (result >> 1) ^ -(result & 1)  # zigzag
        shift += 7


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def message_indexes(indexes: list[int]) -> bytes:
    if indexes == [0]:
        return b"\x00"
    return _varint(len(indexes)) + b"".join(_varint(i) for i in indexes)


def cached_file(registry: RegistryOptions, schema_id: int) -> Any:
    """The file descriptor of schema ``schema_id``: fetched and built once per worker."""
    key = (registry.url, schema_id)
    with _lock:
        found = _files_by_id.get(key)
    if found is None:
        registered = RegistryClient(registry).schema_by_id(schema_id)
        if registered.schema_type.upper() != "PROTOBUF":
            raise WireFormatError(
                f"Schema id {schema_id} is a {registered.schema_type} schema, not Protobuf."
            )
        found = file_descriptor(registered.schema)
        with _lock:
            _files_by_id[key] = found
    return found


class ProtobufDecoder:
    """Decodes one column's batches; writer descriptors by id, cached per worker."""

    def __init__(
        self,
        arrow_type: pa.DataType,
        registry: RegistryOptions,
        mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST",
    ) -> None:
        self.arrow_type = arrow_type
        self.registry = registry
        self.mode = mode

    def _file(self, schema_id: int) -> Any:
        return cached_file(self.registry, schema_id)

    def decode(self, values: pa.Array) -> pa.Array:
        from google.protobuf import message_factory

        out: list[Any] = []
        for row, data in enumerate(values.to_pylist()):
            if data is None:
                out.append(None)
                continue
            schema_id: int | None = None
            try:
                schema_id, payload = split_header(data, f" in row {row} of this batch")
                stream = io.BytesIO(bytes(payload))
                count = _read_varint(stream)
                indexes = [0] if count == 0 else [_read_varint(stream) for _ in range(count)]
                message = message_descriptor(self._file(schema_id), indexes)
                parsed = message_factory.GetMessageClass(message).FromString(stream.read())
                out.append(_to_python(parsed))
            except (SchemaNotFoundError, WireFormatError):
                if self.mode == "FAILFAST":
                    raise
                out.append(None)
            except KafkaDirectError:
                raise
            except Exception as exc:
                if self.mode == "FAILFAST":
                    raise WireFormatError(
                        f"Row {row} of this batch does not decode with Protobuf schema id "
                        f"{schema_id} ({type(exc).__name__}: {exc}; first bytes: "
                        f"{preview(data)}). Use mode 'PERMISSIVE' to get null for such records."
                    ) from exc
                out.append(None)
        return pa.array(out, type=self.arrow_type)


class ProtobufEncoder:
    """Encodes one column's batches as the message ``message_name`` of schema ``schema_id``."""

    def __init__(self, registry: RegistryOptions, schema_id: int, message_name: str | None) -> None:
        self.registry = registry
        self.schema_id = schema_id
        self.message_name = message_name

    def encode(self, values: pa.Array) -> pa.Array:
        from google.protobuf import message_factory

        file = cached_file(self.registry, self.schema_id)
        descriptor = message_descriptor(file, name=self.message_name)
        top = list(file.message_types_by_name.values())
        indexes = [top.index(descriptor)] if descriptor in top else [0]
        cls = message_factory.GetMessageClass(descriptor)
        prefix = header(self.schema_id) + message_indexes(indexes)
        out: list[bytes | None] = []
        for value in values.to_pylist():
            if value is None:
                out.append(None)
                continue
            message = cls()
            _fill(message, value)
            out.append(prefix + message.SerializeToString())
        return pa.array(out, pa.binary())
