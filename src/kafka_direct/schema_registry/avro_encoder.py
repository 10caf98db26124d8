"""Arrow arrays of Spark values → Avro records (bare, or in the Confluent wire format), for
``to_avro``'s Arrow UDF. Runs in the Spark Python worker.

Every record is written into one buffer (header + Avro, with fastavro), and the output
``binary`` array is built from that buffer and the record offsets, without a bytes object per
record. Without a schema, the schema is derived from the first batch's type
(:mod:`.avro_derive`) and registered once per worker process.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import fastavro
import pyarrow as pa
from fastavro.schema import expand_schema

from kafka_direct.schema_registry.avro_codec import Converter, from_spark_converter
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

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}

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
        if self.schema is None:
            self._derive(values.type)
        assert self.schema is not None
        if self._state is None:
            import json

            loaded = json.loads(self.schema)
            self._state = (
                fastavro.parse_schema(loaded),
                from_spark_converter(expand_schema(loaded)),
            )
        parsed, convert = self._state
        prefix = b"" if self.schema_id is None else header(self.schema_id)
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
