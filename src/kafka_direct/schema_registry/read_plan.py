"""What a planned read of Schema Registry records decodes into, and with what. Pure: built in the
Spark driver (``from_avro``, ``from_protobuf``, the source's ``valueFormat``) and pickled into
the Python workers with the decoder it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

__all__ = ["BatchDecoder", "ReadPlan", "Where", "batch_row", "capital"]

#: Names the record in row N of a batch, for messages ("row 3 of this batch ...").
Where = Callable[[int], str]


class BatchDecoder(Protocol):
    """Decodes one Arrow batch of records; ``where(row)`` names a record in messages, and
    ``failed``, in PERMISSIVE mode, gets the rows that did not decode (null for that reason)."""

    def decode(
        self, values: pa.Array, where: Where = ..., failed: list[int] | None = None
    ) -> pa.Array: ...


@dataclass(frozen=True)
class ReadPlan:
    """A planned read: the reader's types, the decoder, and where the reader schema came from."""

    #: the reader schema's Spark type (a pyspark DataType)
    spark_type: Any
    #: its Arrow type, as Spark expects the decoded column
    arrow_type: pa.DataType
    decoder: BatchDecoder
    #: for messages: "subject 'x' version 3 (schema id 7)", or "jsonFormatSchema"
    described: str


def batch_row(row: int) -> str:
    """Where a record is, as far as a column function can know: the row in this Arrow batch and
    the Spark partition (the Kafka topic, partition and offset are other columns). The source's
    own decode (``valueFormat``) names the topic, partition and offset instead."""
    from pyspark import TaskContext

    context = TaskContext.get()
    where = f"row {row} of this batch"
    return where if context is None else f"{where} in Spark partition {context.partitionId()}"


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]
