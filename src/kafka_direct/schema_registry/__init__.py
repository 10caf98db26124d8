"""Records in the Confluent wire format (magic byte 0, a 4-byte schema id, then Avro bytes), with
their schemas in a Confluent-compatible Schema Registry. Plain library: the driver and the Python
workers.

The public functions are in :mod:`kafka_direct.functions` (``from_avro`` / ``to_avro``). This
package holds their parts, by process:

- :mod:`.options` (PURE): the registry options, parsed and validated once, secrets redacted;
- :mod:`.avro_types` (PURE): Avro schema → Spark type, as spark-avro's ``SchemaConverters``;
- :mod:`.wire` (PURE): the 5-byte header and subject name strategies;
- :mod:`.client` (driver and Python workers): the registry's REST API, schemas cached per id;
- :mod:`.avro_codec` (Python workers): Arrow batches of records → Spark values, in C where it
  can (:mod:`.avro_native`, the ``_avro_arrow`` extension, with programs compiled by
  :mod:`.avro_program` and defaults by :mod:`.avro_defaults`), else with ``fastavro``;
- :mod:`.avro_encoder` (Python workers): Spark values → Avro, with ``fastavro``; the schema of a
  new subject derived from the Spark type by :mod:`.avro_derive`.
"""

from __future__ import annotations

from kafka_direct.schema_registry.errors import (
    SchemaNotFoundError,
    SchemaRegistryError,
    WireFormatError,
)

__all__ = ["SchemaNotFoundError", "SchemaRegistryError", "WireFormatError"]
