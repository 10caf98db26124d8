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
- What idle consumers hold (their prefetched records, estimated by
  :meth:`~kafka_direct.consumer.task_consumer.TaskConsumer.idle_prefetch_bytes`) is bounded
  too: the reader passes a task's memory budget (:mod:`~kafka_direct.consumer.read`), and
  least-recently-used idle consumers beyond it are closed.
- A packed task's consumer is pooled under its set of partitions, and packing cuts tasks by
  each micro-batch's record counts, so under sparse or uneven load that set rarely recurs. On a
  miss, a packed task adopts the idle packed consumer (same group, configuration and read
  path) that shares the most partitions with it, if any does (:func:`adopt`), and its
  ``start_at`` assigns it afresh on a new client (re-assigning a client waits for its fetch
  in flight: see :class:`~kafka_direct.consumer.packed.GroupConsumer`). A packed task whose
  partitions no idle one shares gets a new consumer, unless
  :data:`UNRELATED_PACKED_IDLE` idle packed consumers could serve it: then the least recently
  used of them. Packings that recur (busy partitions, packed alike) still find their own.

Logs name the group and topic-partition only, never configuration values, which may hold secrets.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from kafka_direct.consumer.task_consumer import TaskConsumer
from kafka_direct.executor.lease_pool import Policy, WorkerPool

__all__ = ["CONSUMERS", "UNRELATED_PACKED_IDLE", "PoolKey", "adopt", "get_pool"]

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0

#: How many idle packed consumers a worker keeps for packed tasks that share no partition with
#: any of them (stable packings whose tasks a worker serves in turn) before such a task adopts
#: one (module docstring). Simulated over ``pack_ranges`` under sparse load (40 and 200
#: partitions, 2 and 4 workers, 300 micro-batches), a worker's idle packed consumers stayed at
#: 2 to 16, against the 64 of the capacity without adoption, while a stable packing kept all
#: its hits.
UNRELATED_PACKED_IDLE = 16


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


def adopt(have: PoolKey, want: PoolKey) -> int | None:
    """Whether the idle consumer of ``have`` may serve a packed task of ``want``, and how many
    partitions the two share (the pool's ``Policy.adopt``): packed consumers of the same group,
    configuration and read path only."""
    if not (have.assignment and want.assignment):
        return None
    kind = (have.group_id, have.config_fingerprint, have.fast_path)
    if kind != (want.group_id, want.config_fingerprint, want.fast_path):
        return None
    return len(set(have.assignment).intersection(want.assignment))


def _idle_prefetch_bytes(consumer: TaskConsumer) -> int:
    return consumer.idle_prefetch_bytes()


#: The read side's rules (see the module docstring).
CONSUMERS = Policy(
    "consumer",
    log,
    capacity=DEFAULT_CAPACITY,
    idle_timeout_s=DEFAULT_IDLE_TIMEOUT_S,
    one_per_key=True,
    idle_bytes_of=_idle_prefetch_bytes,
    adopt=adopt,
    adopt_unrelated_from=UNRELATED_PACKED_IDLE,
)

#: This process's consumer pool: ``get_pool(factory, capacity=..., idle_timeout_s=...,
#: idle_bytes=...)``; the first call creates it with ``factory``, later ones update the limits
#: given.
_process_pool: WorkerPool[PoolKey] = WorkerPool(CONSUMERS)
get_pool = _process_pool.get
