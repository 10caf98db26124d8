"""Offset stores: where consumed offsets live outside Spark's checkpoint. Plain library: runs in
the Spark driver (the direct stream's ``offsetStore=``, ``foreachBatch`` functions) and in the
user's process (the CLI, computing ``startingOffsets``).

- :class:`KafkaGroupStore`: a Kafka consumer group, visible to lag tools; at-least-once output.
- :class:`SqlOffsetStore`: a table in SQLite, PostgreSQL or MySQL/MariaDB; exactly-once output
  when the results are written through :meth:`SqlOffsetStore.transaction` (the direct stream) or
  :func:`exactly_once_foreach_batch` (Structured Streaming).
- :func:`starting_offsets_json`: resume a ``readStream`` from any store.
- :func:`open_store`: a store named by a URL (``kafka://``, ``sqlite:///``, ``postgresql://``,
  ``mysql://``), as the CLI takes it.

The interface is :class:`kafka_direct.stores.base.OffsetStore`; a store that cannot be opened
(its database unreachable, a login refused) raises :class:`~kafka_direct.stores.OffsetStoreError`.
"""

from __future__ import annotations

from kafka_direct.stores.base import OffsetStore, OffsetStoreError
from kafka_direct.stores.exactly_once import (
    already_applied,
    exactly_once_foreach_batch,
    starting_offsets_json,
)
from kafka_direct.stores.kafka_store import KafkaGroupStore
from kafka_direct.stores.sql_store import SqlOffsetStore, StoreSession
from kafka_direct.stores.url import open_store

__all__ = [
    "KafkaGroupStore",
    "OffsetStore",
    "OffsetStoreError",
    "SqlOffsetStore",
    "StoreSession",
    "already_applied",
    "exactly_once_foreach_batch",
    "open_store",
    "starting_offsets_json",
]
