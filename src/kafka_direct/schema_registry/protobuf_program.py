"""Compiles what the C Protobuf decoder (``_protobuf_arrow``) runs for one reader message: the
builder spec of its Spark type's Arrow form (the Avro decoder's builders, :class:`Builders`)
and one int32 program describing every message and enum reachable from it. Pure: no pyspark;
runs in the Spark Python worker (once per reader schema), and in unit tests.

Each field's entry says its number, its type, whether it is repeated or has presence (a
field without presence that holds its default value is null, as spark-protobuf gives it), its
builder, and its message or enum. A map field is a repeated field of entry messages whose
absent key or value is its default. What the program does not cover raises
:class:`Unsupported` and every record goes through the Python path: groups, and a Spark type
that does not match the message field for field.

The numbers below are the C header's (``_native/_protobuf_decode.h``); keep both in step.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kafka_direct.schema_registry.avro_defaults import Unsupported
from kafka_direct.schema_registry.avro_program import (
    K_BIN,
    K_BOOL,
    K_F32,
    K_F64,
    K_I32,
    K_I64,
    K_LIST,
    K_STRUCT,
    Builders,
)
from kafka_direct.schema_registry.protobuf_schema import TIMESTAMP, repeated

__all__ = ["Program", "Unsupported", "compile_program"]

(
    PT_INT32,
    PT_INT64,
    PT_UINT32,
    PT_UINT64,
    PT_SINT32,
    PT_SINT64,
    PT_FIXED32,
    PT_FIXED64,
    PT_SFIXED32,
    PT_SFIXED64,
    PT_FLOAT,
    PT_DOUBLE,
    PT_BOOL,
    PT_STRING,
    PT_BYTES,
    PT_ENUM,
    PT_MESSAGE,
    PT_TIMESTAMP,
    PT_MAP,
) = range(1, 20)
PL_IMPLICIT, PL_PRESENCE, PL_REPEATED = range(1, 4)
PM_ENTRY = 1

_KINDS = {
    PT_INT32: K_I32,
    PT_UINT32: K_I32,
    PT_SINT32: K_I32,
    PT_FIXED32: K_I32,
    PT_SFIXED32: K_I32,
    PT_INT64: K_I64,
    PT_UINT64: K_I64,
    PT_SINT64: K_I64,
    PT_FIXED64: K_I64,
    PT_SFIXED64: K_I64,
    PT_TIMESTAMP: K_I64,
    PT_FLOAT: K_F32,
    PT_DOUBLE: K_F64,
    PT_BOOL: K_BOOL,
    PT_STRING: K_BIN,
    PT_BYTES: K_BIN,
    PT_ENUM: K_BIN,
    PT_MESSAGE: K_STRUCT,
    PT_MAP: K_STRUCT,
}


@dataclass(frozen=True)
class Program:
    builders: Builders
    code: bytes
    names: bytes
    #: the C decoder's scratch space: one slot per field and per oneof of every message
    slots: int


def _scalar_types() -> dict[int, int]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {
        F.TYPE_INT32: PT_INT32,
        F.TYPE_INT64: PT_INT64,
        F.TYPE_UINT32: PT_UINT32,
        F.TYPE_UINT64: PT_UINT64,
        F.TYPE_SINT32: PT_SINT32,
        F.TYPE_SINT64: PT_SINT64,
        F.TYPE_FIXED32: PT_FIXED32,
        F.TYPE_FIXED64: PT_FIXED64,
        F.TYPE_SFIXED32: PT_SFIXED32,
        F.TYPE_SFIXED64: PT_SFIXED64,
        F.TYPE_FLOAT: PT_FLOAT,
        F.TYPE_DOUBLE: PT_DOUBLE,
        F.TYPE_BOOL: PT_BOOL,
        F.TYPE_STRING: PT_STRING,
        F.TYPE_BYTES: PT_BYTES,
    }


class _Compiler:
    def __init__(self, builders: Builders) -> None:
        self.builders = builders
        self.messages: list[list[int]] = []
        self.enums: list[list[int]] = []
        self.enum_index: dict[str, int] = {}
        self.names = bytearray()
        self.slots = 0
        self.scalars = _scalar_types()

    def enum(self, descriptor: Any) -> int:
        found = self.enum_index.get(descriptor.full_name)
        if found is not None:
            return found
        # A map entry without its value holds number 0, which proto2 enums may lack: then the
        # C pass leaves the record to the Python path.
        body = [len(descriptor.values), 0]
        for value in descriptor.values:
            name = value.name.encode()
            body += [value.number, len(self.names), len(name)]
            self.names += name
        self.enums.append(body)
        self.enum_index[descriptor.full_name] = len(self.enums) - 1
        return len(self.enums) - 1

    def expect(self, builder: int, kind: int) -> None:
        if self.builders.kinds[builder] != kind:
            raise Unsupported(f"builder {builder} is not of kind {kind}")

    def message(self, descriptor: Any, builder: int, entry: bool = False) -> int:
        from google.protobuf.descriptor import FieldDescriptor as F

        self.expect(builder, K_STRUCT)
        children = self.builders.children[builder]
        fields = list(descriptor.fields)
        if len(children) != len(fields):
            raise Unsupported(f"{descriptor.full_name}: fields and Spark type differ")
        oneofs = {o.full_name: i for i, o in enumerate(descriptor.oneofs)}
        index = len(self.messages)
        self.messages.append([])
        body = [PM_ENTRY if entry else 0, builder, len(fields), len(oneofs), self.slots]
        self.slots += len(fields) + len(oneofs)
        for field, target in zip(fields, children, strict=True):
            is_map = field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
            is_repeated = repeated(field)
            element = target
            if is_repeated:
                self.expect(target, K_LIST)
                element = self.builders.children[target][0]
            aux = 0
            if is_map:
                kind = PT_MAP
                aux = self.message(field.message_type, element, entry=True)
            elif field.type == F.TYPE_MESSAGE and field.message_type.full_name == TIMESTAMP:
                kind = PT_TIMESTAMP
            elif field.type == F.TYPE_MESSAGE:
                kind = PT_MESSAGE
                aux = self.message(field.message_type, element)
            elif field.type == F.TYPE_ENUM:
                kind = PT_ENUM
                aux = self.enum(field.enum_type)
            elif field.type in self.scalars:
                kind = self.scalars[field.type]
            else:
                raise Unsupported(f"{field.full_name}: Protobuf type {field.type}")
            self.expect(element, _KINDS[kind])
            label = (
                PL_REPEATED if is_repeated else PL_PRESENCE if field.has_presence else PL_IMPLICIT
            )
            oneof = field.containing_oneof
            body += [
                field.number,
                kind,
                label,
                target,
                aux,
                -1 if oneof is None else oneofs[oneof.full_name],
            ]
        self.messages[index] = body
        return index

    def code(self) -> bytes:
        head = 2 + len(self.messages) + len(self.enums)
        offsets: list[int] = []
        at = head
        for body in (*self.messages, *self.enums):
            offsets.append(at)
            at += len(body)
        flat = [len(self.messages), len(self.enums), *offsets]
        for body in (*self.messages, *self.enums):
            flat += body
        return array("i", flat).tobytes()


def compile_program(message: Any, arrow_type: pa.DataType) -> Program:
    """The program that decodes ``message`` (a descriptor) into ``arrow_type`` (its Spark
    type's Arrow form); :class:`Unsupported` when the C decoder does not cover it."""
    if message.full_name == TIMESTAMP:
        raise Unsupported("a Timestamp as the whole record")
    builders = Builders(arrow_type)
    compiler = _Compiler(builders)
    compiler.message(message, 0)
    return Program(builders, compiler.code(), bytes(compiler.names), compiler.slots)
