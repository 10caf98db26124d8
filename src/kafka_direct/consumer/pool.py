"""The consumer pool: the executor floor's lease pool (:mod:`kafka_direct.executor.lease_pool`)
under the rules of Spark's ``KafkaDataConsumer`` (the SPARK-22606 fix). Runs in Spark executors
(Python workers).

Python workers are reused between tasks, so a consumer opened by one task can serve the next
one reading the same topic-partition with the same configuration. What the read side asks of
the shared pool:

- One cached consumer per key. While it is in use, a second holder gets a fresh *uncached*
  consumer, closed on release: a consumer is never shared, as it is not safe for concurrent use.
- A task reattempt (``TaskContext.attemptNumber() > 0``) or a failed read invalidates the cached
  consumer, since the failure may come from its state: it is closed now if idle, or by its
  holder's release; the reattempt reads with an uncached consumer.
- Past ``capacity`` (``consumerCache.capacity``), least-recently-used idle consumers are closed;
  idle ones expire after ``idle_timeout_s`` (``consumerCache.timeoutMs``), closed by the pool's
  reaper thread while the worker waits for tasks.

Logs name the group and topic-partition only, never configuration values, which may hold secrets.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from kafka_direct.executor.lease_pool import Policy, WorkerPool

__all__ = ["CONSUMERS", "PoolKey", "get_pool"]

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0

#: The read side's rules (see the module docstring).
CONSUMERS = Policy(
    "consumer",
    log,
    capacity=DEFAULT_CAPACITY,
    idle_timeout_s=DEFAULT_IDLE_TIMEOUT_S,
    one_per_key=True,
)


class PoolKey(NamedTuple):
    """What makes two consumers interchangeable: the same partition (or, for a packed task, the
    same set of partitions), the same configuration, and the same read path (``fast_path``:
    the C reader of ``consumer.native``, or not)."""

    group_id: str
    topic: str
    partition: int
    config_fingerprint: str
    fast_path: bool = False
    #: A packed task's partitions, sorted (its consumer is assigned all of them); empty for a
    #: task of one range, whose partition is ``topic``/``partition``.
    assignment: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        more = f" (+{len(self.assignment) - 1} more)" if len(self.assignment) > 1 else ""
        return f"{self.group_id}/{self.topic}-{self.partition}{more}"


#: This process's consumer pool: ``get_pool(factory, capacity=..., idle_timeout_s=...)``; the
#: first call creates it with ``factory``, later ones update the limits given.
_process_pool: WorkerPool[PoolKey] = WorkerPool(CONSUMERS)
get_pool = _process_pool.get
