"""Protobuf records in the Confluent wire format ⇄ Spark values. Runs in the Spark driver (the
result type, from the reader schema's descriptor) and in the Python workers (decoding and
encoding, inside the Arrow UDFs that ``from_protobuf`` / ``to_protobuf`` build).

A Protobuf record is ``0x00``, the 4-byte schema id, the *message indexes* (a zigzag varint
count, then that many zigzag varints: the path to the message type in the schema's file; a
single ``0`` byte means the first message), then the Protobuf bytes. Schemas, their references
and the Spark type are in :mod:`.protobuf_schema`.

A record whose writer message is the reader's message (the same full name, in any version of
the subject) is parsed with the *reader's* descriptor, as spark-protobuf parses every record:
fields match by number, so a field added since the record was written is null, a removed one
is skipped, and a renamed one keeps its value. A record of another message type is parsed with
its writer's descriptor and its fields matched to the reader's by name. As spark-protobuf
without ``emit.default.values``, a field left at its default is null.
"""

from __future__ import annotations

import datetime
import io
from typing import Any, Literal

import pyarrow as pa

from kafka_direct.errors import KafkaDirectError
from kafka_direct.schema_registry import protobuf_native
from kafka_direct.schema_registry.avro_native import merge
from kafka_direct.schema_registry.errors import (
    SchemaNotFoundError,
    SchemaRegistryError,
    WireFormatError,
)
from kafka_direct.schema_registry.options import RegistryOptions
from kafka_direct.schema_registry.protobuf_program import Program, Unsupported, compile_program
from kafka_direct.schema_registry.protobuf_schema import (
    TIMESTAMP,
    cached_file,
    file_descriptor,
    message_descriptor,
    registered_file,
    repeated,
    to_spark_type,
)
from kafka_direct.schema_registry.read_plan import Where, batch_row, capital
from kafka_direct.schema_registry.wire import header, preview, split_header

__all__ = [
    "ProtobufDecoder",
    "ProtobufEncoder",
    "cached_file",
    "file_descriptor",
    "message_descriptor",
    "message_indexes",
    "read_indexes",
    "registered_file",
    "to_spark_type",
]


def _to_python(message: Any) -> Any:
    """A message as Spark values: set fields only (defaults are null), enums by name."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.DESCRIPTOR.full_name == TIMESTAMP:
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
            return _signed(f, v)

        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {
                _signed(key_field, k): scalar(v, value_field) for k, v in value.items()
            }
        elif repeated(field):
            out[field.name] = [scalar(v) for v in value]
        else:
            out[field.name] = scalar(value)
    return out


def _fill(message: Any, values: dict[str, Any]) -> None:
    """Set a message's fields from Spark values (the reverse of :func:`_to_python`)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.DESCRIPTOR.full_name == TIMESTAMP:
        message.FromDatetime(values)
        return
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None or value is None:
            continue
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            target = getattr(message, name)
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items() if isinstance(value, dict) else value:
                k = _enum(key_field, k)
                if value_field.type == F.TYPE_MESSAGE:
                    _fill(target[k], v)
                else:
                    target[k] = _enum(value_field, v)
        elif repeated(field):
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


def _unsigned_bits(field: Any) -> int:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {F.TYPE_UINT32: 32, F.TYPE_FIXED32: 32, F.TYPE_UINT64: 64, F.TYPE_FIXED64: 64}.get(
        field.type, 0
    )


def _signed(field: Any, value: Any) -> Any:
    """An unsigned field's value in Spark's signed int/bigint: above the signed range it wraps,
    as the Java values spark-protobuf reads do (uint32 4294967295 is -1)."""
    bits = _unsigned_bits(field)
    if bits and value >= 1 << (bits - 1):
        return value - (1 << bits)
    return value


def _enum(field: Any, value: Any) -> Any:
    """A Spark value as the field takes it: an enum's number for its name, an unsigned field's
    value for a negative Spark value (the reverse of :func:`_signed`)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_ENUM and isinstance(value, str):
        return field.enum_type.values_by_name[value].number
    bits = _unsigned_bits(field)
    if bits and isinstance(value, int) and value < 0:
        return value + (1 << bits)
    return value


# A malformed header raises ValueError, not WireFormatError: the decoder's catch-all turns it
# into a WireFormatError that names the record (FAILFAST) or a null (PERMISSIVE).


def _read_varint(stream: io.BytesIO) -> int:
    """A zigzag varint of at most 10 bytes (64 bits, as Protobuf's): a longer one is malformed,
    and would cost time quadratic in its length to build."""
    result = 0
    for shift in range(0, 70, 7):
        byte = stream.read(1)
        if not byte:
            raise ValueError("the record ends inside its Protobuf message indexes")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (result >> 1) ^ -(result & 1)  # zigzag
    raise ValueError("a Protobuf message index longer than 10 bytes")


def read_indexes(stream: io.BytesIO, size: int) -> list[int]:
    """The message indexes at the stream's position (``size``: the stream's length), as
    Confluent's deserializers read them: a count of 0 is ``[0]`` (the first message); a negative
    count or index is malformed, and so is a count larger than the bytes left (each index takes
    one at least)."""
    count = _read_varint(stream)
    if count == 0:
        return [0]
    if count < 0 or count > size - stream.tell():
        raise ValueError(f"a count of {count} Protobuf message indexes")
    indexes = [_read_varint(stream) for _ in range(count)]
    if min(indexes) < 0:
        raise ValueError(f"a negative Protobuf message index in {indexes}")
    return indexes


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


class ProtobufDecoder:
    """Decodes one column's batches; writer descriptors by id, cached per worker.

    ``reader_id`` and ``reader_message``: the schema id and full message name the result type
    was planned from. Records of that message are parsed with its descriptor (by field number,
    across versions); without them, every record is parsed with its writer's descriptor.
    """

    def __init__(
        self,
        arrow_type: pa.DataType,
        registry: RegistryOptions,
        mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST",
        *,
        reader_id: int | None = None,
        reader_message: str | None = None,
    ) -> None:
        self.arrow_type = arrow_type
        self.registry = registry
        self.mode = mode
        self.reader_id = reader_id
        self.reader_message = reader_message

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_native": None, "_accepted": {}}

    def _file(self, schema_id: int) -> Any:
        return cached_file(self.registry, schema_id)

    def _program(self) -> Program | None:
        """The C decoder's program for the reader message, or None: no C path here."""
        native: tuple[Program | None] | None = self.__dict__.get("_native")
        if native is None:
            program = None
            if self.reader_id is not None and protobuf_native.available():
                reader = message_descriptor(self._file(self.reader_id), name=self.reader_message)
                try:
                    program = compile_program(reader, self.arrow_type)
                except Unsupported:
                    program = None
            native = self.__dict__["_native"] = (program,)
        return native[0]

    def _accepts(self, schema_id: int, index_bytes: bytes) -> bool:
        """Whether the records of this writer id and message are the reader's message (else,
        or when that cannot be told, the Python path decodes them or says what is wrong)."""
        accepted: dict[tuple[int, bytes], bool] = self.__dict__.setdefault("_accepted", {})
        key = (schema_id, index_bytes)
        if key not in accepted:
            try:
                indexes = read_indexes(io.BytesIO(index_bytes), len(index_bytes))
                message = message_descriptor(self._file(schema_id), indexes)
                accepted[key] = message.full_name == self.reader_message
            except Exception:  # noqa: BLE001 - the Python path reports it, record by record
                accepted[key] = False
        return accepted[key]

    def _message_class(
        self, schema_id: int, indexes: list[int], classes: dict[tuple[int, ...], Any]
    ) -> Any:
        """The class that parses records of this writer id and message, built once per batch."""
        from google.protobuf import message_factory

        key = (schema_id, *indexes)
        found = classes.get(key)
        if found is None:
            message = message_descriptor(self._file(schema_id), indexes)
            if self.reader_id is not None and message.full_name == self.reader_message:
                message = message_descriptor(self._file(self.reader_id), name=message.full_name)
            found = classes[key] = message_factory.GetMessageClass(message)
        return found

    def decode(
        self, values: pa.Array, where: Where = batch_row, failed: list[int] | None = None
    ) -> pa.Array:
        """One Arrow batch of records → one Arrow array of the reader's type: in C where the
        extension is built and covers the reader message (:mod:`.protobuf_native`), the other
        records (and all of them otherwise) through Python message objects.

        ``where(row)`` names a record in messages. ``failed``, in PERMISSIVE mode, gets the
        rows that did not decode (and are null for that reason)."""
        program = self._program()
        if program is None:
            return self._decode_python(values, None, where, failed)
        accepted = [key for key in protobuf_native.headers(values) if self._accepts(*key)]
        array, rows = protobuf_native.decode(values, program, accepted)
        if not rows:
            return array
        fallback = self._decode_python(values.take(pa.array(rows, pa.int64())), rows, where, failed)
        return merge(array, rows, fallback)

    def _decode_python(
        self,
        values: pa.Array,
        rows: list[int] | None = None,
        where: Where = batch_row,
        failed: list[int] | None = None,
    ) -> pa.Array:
        """The Python path; ``rows``: each value's row in the whole batch, for messages."""
        classes: dict[tuple[int, ...], Any] = {}
        out: list[Any] = []
        for position, data in enumerate(values.to_pylist()):
            row = position if rows is None else rows[position]
            if data is None:
                out.append(None)
                continue
            schema_id: int | None = None
            try:
                schema_id, payload = split_header(data, f" in {where(row)}")
                stream = io.BytesIO(bytes(payload))
                indexes = read_indexes(stream, len(payload))
                try:
                    cls = self._message_class(schema_id, indexes, classes)
                except SchemaRegistryError as exc:
                    raise type(exc)(f"{exc} It is the writer schema of {where(row)}.") from None
                out.append(_to_python(cls.FromString(stream.read())))
            except (SchemaNotFoundError, WireFormatError):
                if self.mode == "FAILFAST":
                    raise
                out.append(None)
                if failed is not None:
                    failed.append(row)
            except KafkaDirectError:
                raise
            except Exception as exc:
                if self.mode == "FAILFAST":
                    raise WireFormatError(
                        f"{capital(where(row))} does not decode with Protobuf schema id "
                        f"{schema_id} ({type(exc).__name__}: {exc}; first bytes: "
                        f"{preview(data)}). Use mode 'PERMISSIVE' to get null for such records."
                    ) from exc
                out.append(None)
                if failed is not None:
                    failed.append(row)
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
