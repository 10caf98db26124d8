"""The producer pool: the executor floor's lease pool (:mod:`kafka_direct.executor.lease_pool`)
under the write side's rules. Runs in Spark executors (Python workers).

Python workers are reused between tasks, so a producer opened by one write task (its
connections, its producer id) serves the next task with the same configuration. The rules
answer the two bugs of Spark's own producer cache:

- **SPARK-21869**: Spark closed a cached producer when it expired, counted from when it was
  *acquired*, even while a task was still writing with it ("Cannot perform operation after
  producer has been closed"). Here a producer is lent to one holder at a time, and only
  producers that sit idle in the pool can expire, be evicted or be closed: expiry counts from
  the *release*.
- **SPARK-27042**: a task retried on the same executor got the same broken producer on every
  attempt until the query failed. Here a task reattempt (``TaskContext.attemptNumber() > 0``)
  closes every idle producer of its key and gets a new one; a task that failed closes its
  producer instead of returning it; and a producer that is no longer usable (it saw a fatal
  error, ``usable`` is False) is never handed out again, nor kept.

A key pools many producers: a second holder of the same key (a user's thread) gets another one,
so delivery errors always belong to the task that sees them, and both return to the pool. Idle
producers are closed after ``idle_timeout_s`` (``producerCache.timeoutMs``), and beyond
``capacity`` (``producerCache.capacity``) the least recently used idle one is closed. Keys name
configurations by fingerprint, never by value (secrets).
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Protocol

from kafka_direct.executor.lease_pool import Policy, WorkerPool

__all__ = ["PRODUCERS", "PooledProducer", "ProducerKey", "get_producer_pool"]

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_CAPACITY = 8


class PooledProducer(Protocol):
    """All the pool needs from what it keeps (a
    :class:`~kafka_direct.producer.batch_producer.BatchProducer`)."""

    @property
    def usable(self) -> bool: ...

    def close(self) -> None: ...


def _usable(producer: PooledProducer) -> bool:
    return producer.usable


#: The write side's rules (see the module docstring).
PRODUCERS = Policy(
    "producer",
    log,
    capacity=DEFAULT_CAPACITY,
    idle_timeout_s=DEFAULT_IDLE_TIMEOUT_S,
    usable=_usable,
)


class ProducerKey(NamedTuple):
    """What makes two producers interchangeable: the same config (by fingerprint) and the same
    implementation (``kind``: "python", or a fast path's name)."""

    config_fingerprint: str
    kind: str = "python"

    def __str__(self) -> str:
        return f"{self.kind}/{self.config_fingerprint[:12]}"


#: This process's producer pool: ``get_producer_pool(factory, capacity=..., idle_timeout_s=...)``;
#: the first call creates it with ``factory``, later ones update the limits given.
_process_pool: WorkerPool[ProducerKey] = WorkerPool(PRODUCERS)
get_producer_pool = _process_pool.get
