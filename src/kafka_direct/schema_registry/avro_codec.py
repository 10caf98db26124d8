"""Arrow batches of Confluent-framed Avro records ⇄ Arrow arrays of Spark values. Runs in the
Spark Python worker, inside the vectorised (Arrow) UDFs that ``from_avro`` / ``to_avro`` build.

Decoding a batch: one pass over the batch's value buffer. Each record's header names its writer
schema; the schema is fetched once per id per worker (:mod:`.client`), parsed once, and fastavro
resolves it to the reader schema (Avro's resolution rules: defaults for added fields, promotions,
enum symbols, aliases). The decoded values go into one Arrow array of the planned type.

Encoding is in :mod:`.avro_encoder`.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any, Literal

import fastavro
import pyarrow as pa
from fastavro.schema import expand_schema

from kafka_direct.errors import KafkaDirectError
from kafka_direct.schema_registry import avro_native
from kafka_direct.schema_registry.avro_fastavro import number_converter as _number_converter
from kafka_direct.schema_registry.avro_fastavro import parse_strict as _parse
from kafka_direct.schema_registry.avro_native import NativeReader, native_reader
from kafka_direct.schema_registry.avro_program import Program
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.errors import (
    SchemaNotFoundError,
    SchemaRegistryError,
    WireFormatError,
)
from kafka_direct.schema_registry.options import RegistryOptions
from kafka_direct.schema_registry.read_plan import Where, batch_row, capital
from kafka_direct.schema_registry.references import avro_schema
from kafka_direct.schema_registry.wire import HEADER_SIZE, header, preview, split_header

__all__ = ["AvroDecoder", "from_spark_converter", "to_spark_converter"]

Converter = Callable[[Any], Any]

_parsed_lock = threading.Lock()
_parsed_by_id: dict[tuple[str, int], Any] = {}


def _is_null(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    kind = schema.get("type")
    return kind if isinstance(kind, str) else _type_name(kind)


def _matches(schema: Any, value: Any) -> bool:
    """Whether a decoded Python value came from this union branch (fastavro does not say)."""
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    kind = _type_name(schema)
    if logical == "decimal":
        return isinstance(value, decimal.Decimal)
    if logical == "uuid":
        return isinstance(value, (uuid.UUID, str))
    if logical == "date":
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    if logical and "timestamp" in logical:
        return isinstance(value, datetime.datetime)
    return {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "array": lambda v: isinstance(v, list),
        "map": lambda v: isinstance(v, dict),
        "record": lambda v: isinstance(v, dict),
        "error": lambda v: isinstance(v, dict),
    }.get(kind, lambda v: False)(value)


def to_spark_converter(schema: Any) -> Converter | None:
    """A function from fastavro's value to the Arrow-ready value of the Spark type, or ``None``
    where fastavro's value is already right (the common case: no per-field work)."""
    if isinstance(schema, list):
        rest = [b for b in schema if not _is_null(b)]
        if len(rest) == 1:
            inner = to_spark_converter(rest[0])
            return None if inner is None else (lambda v: None if v is None else inner(v))
        names = sorted(_type_name(b) for b in rest)
        if names == ["int", "long"]:
            return _number_converter(rest)
        if names == ["double", "float"]:
            return None
        members = [(f"member{i}", b, to_spark_converter(b)) for i, b in enumerate(rest)]
        records = [b for b in rest if _type_name(b) in ("record", "error")]

        def union(value: Any) -> Any:
            if value is None:
                return None
            if isinstance(value, tuple):  # (record name, record): fastavro's record branches
                name, value = value
                for field, branch, inner in members:
                    if isinstance(branch, dict) and branch.get("name") == name:
                        return {field: inner(value) if inner else value}
            for field, branch, inner in members:
                if (len(records) < 2 or branch not in records) and _matches(branch, value):
                    return {field: inner(value) if inner else value}
            return None

        return union
    if isinstance(schema, str):
        return None
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if isinstance(kind, (dict, list)):
        return to_spark_converter(kind)
    if logical == "uuid":
        return lambda v: None if v is None else str(v)
    if logical == "time-millis":
        return lambda v: (v.hour * 3600 + v.minute * 60 + v.second) * 1000 + v.microsecond // 1000
    if logical == "time-micros":
        return lambda v: (v.hour * 3600 + v.minute * 60 + v.second) * 1_000_000 + v.microsecond
    if kind == "array":
        item = to_spark_converter(schema["items"])
        return None if item is None else (lambda v: [item(x) for x in v])
    if kind == "map":
        mapped = to_spark_converter(schema["values"])
        return None if mapped is None else (lambda v: {k: mapped(x) for k, x in v.items()})
    if kind in ("record", "error"):
        return _record_converter(schema, to_spark_converter)
    return None


def from_spark_converter(schema: Any) -> Converter | None:
    """A function from a Spark value (as ``pyarrow``'s ``to_pylist`` gives it) to what fastavro
    writes for this schema, or ``None`` where no change is needed."""
    if isinstance(schema, list):
        rest = [b for b in schema if not _is_null(b)]
        if len(rest) == 1:
            inner = from_spark_converter(rest[0])
            return None if inner is None else (lambda v: None if v is None else inner(v))
        if sorted(_type_name(b) for b in rest) in (["int", "long"], ["double", "float"]):
            return None
        members = [(f"member{i}", b, from_spark_converter(b)) for i, b in enumerate(rest)]

        def union(value: Any) -> Any:
            if value is None:
                return None
            for field, branch, inner in members:
                chosen = value.get(field)
                if chosen is not None:
                    chosen = inner(chosen) if inner else chosen
                    if _type_name(branch) in ("record", "error", "enum", "fixed"):
                        return (branch["name"], chosen)  # fastavro's tuple notation
                    return chosen
            return None

        return union
    if isinstance(schema, str):
        return None
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        return from_spark_converter(kind)
    if kind == "array":
        item = from_spark_converter(schema["items"])
        return None if item is None else (lambda v: [item(x) for x in v])
    if kind == "map":
        mapped = from_spark_converter(schema["values"])
        if mapped is None:
            return lambda v: dict(v)
        return lambda v: {k: mapped(x) for k, x in v}
    if kind in ("record", "error"):
        return _record_converter(schema, from_spark_converter)
    return None


def _record_converter(
    schema: dict[str, Any], field_converter: Callable[[Any], Converter | None]
) -> Converter | None:
    """Convert a record's fields in place with ``field_converter``'s function for each field
    type, or ``None`` when no field needs converting."""
    fields = [(f["name"], field_converter(f["type"])) for f in schema["fields"]]
    changed = [(name, c) for name, c in fields if c is not None]
    if not changed:
        return None

    def record(value: dict[str, Any]) -> dict[str, Any]:
        for name, convert in changed:
            if value.get(name) is not None:
                value[name] = convert(value[name])
        return value

    return record


def _first_row_of(values: pa.Array, schema_id: int) -> int:
    """The first row written with ``schema_id`` (for a message; runs only on an error)."""
    wanted = header(schema_id)
    for row, value in enumerate(values):
        data = value.as_py()
        if data is not None and data[:HEADER_SIZE] == wanted:
            return row
    return 0


def _binary_views(values: pa.Array) -> tuple[bytes, list[int]]:
    """The value buffer of a (large) binary array and its ``len + 1`` record offsets."""
    if pa.types.is_large_binary(values.type):
        width = 8
    elif pa.types.is_binary(values.type):
        width = 4
    else:
        raise WireFormatError(f"from_avro expects a binary column, got Arrow type {values.type}.")
    offsets_buffer, data_buffer = values.buffers()[1], values.buffers()[2]
    start = values.offset
    offsets = memoryview(offsets_buffer).cast("q" if width == 8 else "i")[
        start : start + len(values) + 1
    ]
    data = b"" if data_buffer is None else data_buffer.to_pybytes()
    return data, offsets.tolist()


class AvroDecoder:
    """Decodes one column's batches. Pickled into the UDF; parses and fetches lazily."""

    def __init__(
        self,
        reader_schema: str,
        arrow_type: pa.DataType,
        *,
        registry: RegistryOptions | None,
        mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST",
        reader_id: int | None = None,
    ) -> None:
        self.reader_schema = reader_schema
        self.arrow_type = arrow_type
        self.registry = registry
        self.mode = mode
        self.reader_id = reader_id
        self._state: tuple[Any, Converter | None] | None = None
        self._native: tuple[NativeReader | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None, "_native": None}

    def _native_reader(self) -> NativeReader | None:
        if self._native is None:
            self._native = (native_reader(json.loads(self.reader_schema), self.arrow_type),)
        return self._native[0]

    def _reader(self) -> tuple[Any, Converter | None]:
        if self._state is None:
            loaded = json.loads(self.reader_schema)
            converter = to_spark_converter(expand_schema(loaded))
            self._state = (_parse(self.reader_schema), converter)
        return self._state

    def _writer_json(self, schema_id: int) -> Any:
        """The writer schema's JSON (the registry client caches it per id per process)."""
        assert self.registry is not None
        registered = RegistryClient(self.registry).schema_by_id(schema_id)
        if registered.schema_type.upper() != "AVRO":
            raise WireFormatError(
                f"Schema id {schema_id} is a {registered.schema_type} schema, not Avro: "
                "use the function for that format (from_protobuf, from_json_schema)."
            )
        return json.loads(avro_schema(RegistryClient(self.registry), registered))

    def _writer(self, schema_id: int) -> Any:
        assert self.registry is not None
        key = (self.registry.url, schema_id)
        with _parsed_lock:
            found = _parsed_by_id.get(key)
        if found is not None:
            return found
        registered = RegistryClient(self.registry).schema_by_id(schema_id)
        if registered.schema_type.upper() != "AVRO":
            raise WireFormatError(
                f"Schema id {schema_id} is a {registered.schema_type} schema, not Avro: "
                "use the function for that format (from_protobuf, from_json_schema)."
            )
        parsed = _parse(avro_schema(RegistryClient(self.registry), registered))
        with _parsed_lock:
            _parsed_by_id[key] = parsed
        return parsed

    def decode(
        self, values: pa.Array, where: Where = batch_row, failed: list[int] | None = None
    ) -> pa.Array:
        """One Arrow batch of records → one Arrow array of the reader's type: in C where the
        extension is built and covers the schemas (:mod:`.avro_native`), else with fastavro.

        ``where(row)`` names a record in messages. ``failed``, in PERMISSIVE mode, gets the
        rows that did not decode (and are null for that reason), in no particular order."""
        native = self._native_reader()
        if native is None:
            return self._decode_python(values, None, where, failed)
        failfast = self.mode == "FAILFAST"
        programs: list[tuple[int, Program | None]] = []
        # Ids the registry does not have: their records fail (FAILFAST) or are null, in row
        # order with the batch's other bad records, so a message names the first bad record.
        missing: dict[int, SchemaRegistryError] = {}
        if self.registry is None:
            program = native.program(None, None)
            if program is None:
                return self._decode_python(values, None, where, failed)
            programs.append((-1, program))
        else:
            for schema_id in sorted(avro_native.schema_ids(values)):
                try:
                    writer = self._writer_json(schema_id)
                except (SchemaNotFoundError, WireFormatError) as exc:
                    missing[schema_id] = exc
                    programs.append((schema_id, None))  # its records are bad records
                    continue
                except SchemaRegistryError as exc:
                    # Unreachable or refusing us: not the records' fault, so it fails in both
                    # modes, naming the first record that needs the schema.
                    row = _first_row_of(values, schema_id)
                    raise type(exc)(f"{exc} It is the writer schema of {where(row)}.") from None
                program = native.program(schema_id, writer)
                if program is not None:  # else its records go to fastavro, as fallback rows
                    programs.append((schema_id, program))
        decoded = avro_native.decode(
            values,
            native.builders,
            programs,
            framed=self.registry is not None,
            stop_at_error=failfast,
        )
        if decoded.errors and failfast:
            row, code, schema_id, left_over = decoded.errors[0]
            if schema_id in missing and code == avro_native.NO_SCHEMA:
                cause = missing[schema_id]
                raise type(cause)(f"{cause} It is the writer schema of {where(row)}.")
            raise self._native_error(values, where, row, code, schema_id, left_over)
        if failed is not None:
            failed.extend(error[0] for error in decoded.errors)
        if not decoded.fallback:
            return decoded.array
        rows = decoded.fallback
        fallback = self._decode_python(values.take(pa.array(rows, pa.int64())), rows, where, failed)
        return avro_native.merge(decoded.array, rows, fallback)

    def _native_error(
        self, values: pa.Array, where: Where, row: int, code: int, schema_id: int, left_over: int
    ) -> WireFormatError:
        record = values[row].as_py()
        if code == avro_native.NOT_FRAMED:
            try:
                split_header(record, f" in {where(row)}")
            except WireFormatError as exc:
                return exc
        if code == avro_native.LEFT_OVER:
            return WireFormatError(
                f"{capital(where(row))} has {left_over} byte(s) left over after its Avro "
                "record"
                + (f" (schema id {schema_id})" if schema_id >= 0 else "")
                + ": the record and its schema do not match."
            )
        which = f"writer schema id {schema_id}" if schema_id >= 0 else "jsonFormatSchema"
        reason = avro_native.REASONS.get(code, f"error {code}")
        return WireFormatError(
            f"{capital(where(row))} does not decode with {which} ({reason}; first bytes: "
            f"{preview(record)}). Use mode 'PERMISSIVE' to get null for such records."
        )

    def _decode_python(
        self,
        values: pa.Array,
        rows: list[int] | None = None,
        where: Where = batch_row,
        failed: list[int] | None = None,
    ) -> pa.Array:
        """The fastavro path; ``rows``: each value's row in the whole batch, for messages."""
        reader, convert = self._reader()
        data, offsets = _binary_views(values)
        stream = io.BytesIO(data)
        valid = values.is_valid().to_pylist() if values.null_count else None
        out: list[Any] = []
        append = out.append
        read = fastavro.schemaless_reader

        def at(row: int) -> int:
            return row if rows is None else rows[row]

        for row in range(len(values)):
            if valid is not None and not valid[row]:
                append(None)
                continue
            begin, end = offsets[row], offsets[row + 1]
            schema_id: int | None = None
            try:
                if self.registry is None:
                    stream.seek(begin)
                    value = read(stream, reader, None)
                else:
                    if end - begin < HEADER_SIZE or data[begin] != 0:
                        split_header(data[begin:end], f" in {where(at(row))}")  # raises
                    schema_id = int.from_bytes(data[begin + 1 : begin + HEADER_SIZE], "big")
                    try:
                        writer = self._writer(schema_id)
                    except SchemaRegistryError as exc:
                        where_ = where(at(row))
                        raise type(exc)(f"{exc} It is the writer schema of {where_}.") from None
                    stream.seek(begin + HEADER_SIZE)
                    if schema_id == self.reader_id:
                        value = read(stream, writer, None, True, True)
                    else:
                        value = read(stream, writer, reader, True, True)
                if stream.tell() != end:
                    raise WireFormatError(
                        f"{capital(where(at(row)))} has {end - stream.tell()} byte(s) left "
                        "over "
                        f"after its Avro record"
                        + (f" (schema id {schema_id})" if schema_id is not None else "")
                        + ": the record and its schema do not match."
                    )
                append(convert(value) if convert is not None and value is not None else value)
            except (SchemaNotFoundError, WireFormatError):
                if self.mode == "FAILFAST":
                    raise
                append(None)
                if failed is not None:
                    failed.append(at(row))
            except KafkaDirectError:
                raise  # the registry is down, refuses us, or TLS is misconfigured: not the record
            except Exception as exc:
                if self.mode == "FAILFAST":
                    raise self._undecodable(
                        where(at(row)), schema_id, data[begin:end], exc
                    ) from exc
                append(None)
                if failed is not None:
                    failed.append(at(row))
        return pa.array(out, type=self.arrow_type)

    def _undecodable(
        self, where: str, schema_id: int | None, record: bytes, exc: BaseException
    ) -> WireFormatError:
        which = f"writer schema id {schema_id}" if schema_id is not None else "jsonFormatSchema"
        return WireFormatError(
            f"{capital(where)} does not decode with {which} "
            f"({type(exc).__name__}: {exc}; first bytes: {preview(record)}). Use mode "
            "'PERMISSIVE' to get null for such records."
        )
