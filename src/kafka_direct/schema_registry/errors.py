"""Errors of the Schema Registry functions. Plain library: the driver (planning, registering)
and the Python workers (decoding, encoding).

::

    KafkaDirectError
     └── SchemaRegistryError         the registry could not be reached or refused a request
          ├── SchemaNotFoundError    no schema with this id, or no such subject / version
          └── WireFormatError        a record is not in the Confluent wire format, or its bytes
                                     do not decode with the schema its header names

Messages name the registry URL (never its credentials), the schema id or subject, and, for
records, the row's position in its batch and the bytes' first few hex digits.
"""

from __future__ import annotations

from kafka_direct.errors import KafkaDirectError

__all__ = ["SchemaNotFoundError", "SchemaRegistryError", "WireFormatError"]


class SchemaRegistryError(KafkaDirectError):
    """The Schema Registry could not be reached, or answered a request with an error."""


class SchemaNotFoundError(SchemaRegistryError):
    """The registry has no schema with this id, or no such subject or version."""


class WireFormatError(SchemaRegistryError):
    """A record is not ``0x00 + 4-byte schema id + payload``, or its payload does not decode."""
