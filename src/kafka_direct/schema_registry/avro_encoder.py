"""Arrow arrays of Spark values → Avro records (bare, or in the Confluent wire format), for
``to_avro``'s Arrow UDF. Runs in the Spark Python worker.

Every record is written into one buffer (header + Avro), and the output ``binary`` array is
built from that buffer and the record offsets, without a bytes object per record. The records
are written in C (:mod:`.avro_encode_native`) where the extension is built and covers the
schema and column type, else with fastavro; a batch the C code stops on goes through fastavro,
so its bytes and its errors are fastavro's either way. Without a schema, the schema is derived
from the first batch's type (:mod:`.avro_derive`) and registered once per worker process.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import fastavro
import pyarrow as pa
from fastavro.schema import expand_schema

from kafka_direct.schema_registry import avro_encode_native
from kafka_direct.schema_registry.avro_codec import Converter, from_spark_converter
from kafka_direct.schema_registry.avro_encode_program import EncodeProgram
from kafka_direct.schema_registry.client import RegistryClient
from kafka_direct.schema_registry.options import RegistryOptions
from kafka_direct.schema_registry.wire import header

__all__ = ["AvroEncoder"]

_derived_lock = threading.Lock()
_derived_ids: dict[tuple[str, str, str], int] = {}


class AvroEncoder:
    """Encodes one column's batches with one schema; ``schema_id`` None writes bare Avro.

    With ``derive_for`` (the registry and subject) and no schema, the schema is derived from
    the first batch's type as spark-avro derives it (:mod:`.avro_derive`) and registered under
    the subject, once per worker process (registering the same schema again returns its id).
    """

    def __init__(
        self,
        schema: str | None,
        schema_id: int | None,
        derive_for: tuple[RegistryOptions, str] | None = None,
    ) -> None:
        self.schema = schema
        self.schema_id = schema_id
        self.derive_for = derive_for
        self._state: tuple[Any, Converter | None] | None = None
        self._programs: dict[pa.DataType, EncodeProgram | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None, "_programs": {}}

    def _derive(self, arrow_type: pa.DataType) -> None:
        import json

        from kafka_direct.schema_registry.avro_derive import avro_schema_of

        assert self.derive_for is not None
        registry, subject = self.derive_for
        schema = json.dumps(avro_schema_of(arrow_type), separators=(",", ":"))
        key = (registry.url, subject, schema)
        with _derived_lock:
            found = _derived_ids.get(key)
        if found is None:
            found = RegistryClient(registry).register(subject, schema)
            with _derived_lock:
                _derived_ids[key] = found
        self.schema, self.schema_id = schema, found

    def encode(self, values: pa.Array) -> pa.Array:
        """One Arrow batch of Spark values → the binary column of their Avro records."""
        if self.schema is None:
            self._derive(values.type)
        assert self.schema is not None
        prefix = b"" if self.schema_id is None else header(self.schema_id)
        if values.type not in self._programs:
            import json

            self._programs[values.type] = avro_encode_native.program(
                json.loads(self.schema), values.type
            )
        compiled = self._programs[values.type]
        if compiled is None:
            return self._encode_python(values, prefix)
        encoded = avro_encode_native.encode(values, compiled, prefix)
        if encoded.array is not None:
            return encoded.array
        # fastavro writes what the C code would not (so the bytes are its bytes), or raises
        # today's error, which then also names the row the C code stopped at
        try:
            return self._encode_python(values, prefix)
        except Exception as exc:
            reason = avro_encode_native.REASONS.get(encoded.code, f"code {encoded.code}")
            add_note = getattr(exc, "add_note", None)  # Python 3.11 and later
            if add_note is not None:
                add_note(f"to_avro: row {encoded.row} of this batch has {reason}.")
            raise

    def _encode_python(self, values: pa.Array, prefix: bytes) -> pa.Array:
        """The fastavro path: a Python object per record and field."""
        assert self.schema is not None
        if self._state is None:
            import json

            loaded = json.loads(self.schema)
            self._state = (
                fastavro.parse_schema(loaded),
                from_spark_converter(expand_schema(loaded)),
            )
        parsed, convert = self._state
        out = io.BytesIO()
        offsets = [0]
        write = fastavro.schemaless_writer
        for value in values.to_pylist():
            if value is not None:
                out.write(prefix)
                write(out, parsed, convert(value) if convert is not None else value)
            offsets.append(out.tell())
        validity = values.is_valid().buffers()[1] if values.null_count else None
        return pa.Array.from_buffers(
            pa.binary(),
            len(values),
            [validity, pa.array(offsets, pa.int32()).buffers()[1], pa.py_buffer(out.getvalue())],
            null_count=values.null_count,
        )
