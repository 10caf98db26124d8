"""The consumer pool's policy (Spark's ``KafkaDataConsumer`` rules) on the shared lease pool:
one cached consumer per key, an uncached one for a second holder or a reattempt, a failed read
invalidates the key; packed tasks adopt idle packed consumers; what idle consumers hold is
bounded. No broker. The pool's common contract (expiry, capacity, the reaper,
threads, fork safety) is tested once, in ``tests/unit/executor/test_lease_pool.py``."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kafka_direct.config.clients import (
    IDLE_QUEUE_RECORDS,
    ExecutorSettings,
    executor_consumer_config,
)
from kafka_direct.config.fingerprint import config_fingerprint
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.config.source import BATCHES_PER_TASK_BUDGET
from kafka_direct.consumer import pool as cp
from kafka_direct.consumer import read
from kafka_direct.consumer.fetch import PartitionConsumer
from kafka_direct.consumer.pool import CONSUMERS, UNRELATED_PACKED_IDLE, PoolKey
from kafka_direct.errors import KafkaDirectError
from kafka_direct.executor.lease_pool import LeasePool, PoolStats
from kafka_direct.offsets import OffsetRange
from kafka_direct.planning.packing import PackingSettings, pack_ranges
from tests.unit.fakes import FakeClock

SECRET = "hunter2-very-secret"
CONFIG: dict[str, str] = {
    "bootstrap.servers": "localhost:9092",
    "sasl.password": SECRET,
    "group.id": "kd-executor",
}
KEY = PoolKey("kd-executor", "orders", 0, config_fingerprint(CONFIG))
KEY2 = PoolKey("kd-executor", "orders", 1, config_fingerprint(CONFIG))
KEY3 = PoolKey("kd-executor", "orders", 2, config_fingerprint(CONFIG))


class FakeConsumer:
    def __init__(self, config: Mapping[str, str], ident: int) -> None:
        self.config = dict(config)
        self.ident = ident
        self.close_count = 0
        #: What its queue holds while idle (TaskConsumer.idle_prefetch_bytes).
        self.prefetched = 0

    def idle_prefetch_bytes(self) -> int:
        return self.prefetched

    def close(self) -> None:
        self.close_count += 1

    def __repr__(self) -> str:
        return f"FakeConsumer#{self.ident}"


class Factory:
    def __init__(self) -> None:
        self.created: list[FakeConsumer] = []
        self.keys: list[PoolKey] = []
        self.fail_next = False
        self._lock = threading.Lock()

    def __call__(self, key: PoolKey, config: Mapping[str, str]) -> FakeConsumer:
        with self._lock:
            self.keys.append(key)
            if self.fail_next:
                self.fail_next = False
                raise KafkaDirectError("cannot create consumer")
            consumer = FakeConsumer(config, len(self.created))
            self.created.append(consumer)
            return consumer


Pool = LeasePool[PoolKey, FakeConsumer]


@pytest.fixture
def factory() -> Factory:
    return Factory()


@pytest.fixture
def pool(factory: Factory, clock: FakeClock) -> Pool:
    # The fake clock does not move by itself: expiry is driven by the test, not the reaper.
    return LeasePool(
        factory, CONSUMERS, capacity=4, idle_timeout_s=300.0, clock=clock.monotonic, reaper=False
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_miss_then_hit_reuses_the_same_consumer(pool: Pool) -> None:
    first = pool.acquire(KEY, CONFIG)
    assert first.cached
    pool.release(first)
    second = pool.acquire(KEY, CONFIG)
    assert second.cached and second.client is first.client
    pool.release(second)
    assert first.client.close_count == 0
    assert pool.stats() == PoolStats(
        hits=1, misses=1, creations=1, evictions=0, closes=0, size=1, in_use=0
    )


def test_consumer_is_built_from_the_given_config(pool: Pool, factory: Factory) -> None:
    lease = pool.acquire(KEY, CONFIG)
    assert lease.client.config == CONFIG
    assert lease.key == KEY


def test_in_use_cached_consumer_is_never_shared(pool: Pool) -> None:
    holder = pool.acquire(KEY, CONFIG)
    other = pool.acquire(KEY, CONFIG)
    assert holder.cached and not other.cached
    assert other.client is not holder.client
    pool.release(other)
    assert other.client.close_count == 1
    assert holder.client.close_count == 0
    pool.release(holder)
    again = pool.acquire(KEY, CONFIG)
    assert again.client is holder.client and again.cached


def test_reattempt_closes_idle_cached_consumer_and_returns_non_cached(
    pool: Pool,
) -> None:
    old = pool.acquire(KEY, CONFIG)
    pool.release(old)
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert not retry.cached
    assert retry.client is not old.client
    assert old.client.close_count == 1
    assert pool.stats().size == 0
    pool.release(retry)
    assert retry.client.close_count == 1
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.cached and fresh.client not in (old.client, retry.client)


def test_reattempt_marks_in_use_cached_consumer_for_close(
    pool: Pool,
) -> None:
    holder = pool.acquire(KEY, CONFIG)
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert not retry.cached
    assert holder.client.close_count == 0  # never closed under its holder's feet
    pool.release(retry)
    pool.release(holder)
    assert holder.client.close_count == 1
    assert pool.stats().size == 0
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.client is not holder.client and fresh.cached


@pytest.mark.parametrize("cached_lease_fails", [True, False], ids=["cached", "non-cached"])
def test_failed_release_closes_and_invalidates_the_key(
    pool: Pool, cached_lease_fails: bool
) -> None:
    cached = pool.acquire(KEY, CONFIG)
    if cached_lease_fails:
        failing = cached
    else:
        failing = pool.acquire(KEY, CONFIG)
        pool.release(cached)  # idle now, but its key is about to be invalidated
    assert failing.cached is cached_lease_fails
    pool.release(failing, failed=True)
    assert failing.client.close_count == 1
    assert cached.client.close_count == 1
    assert pool.stats().size == 0
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.cached and fresh.client is not cached.client


def test_failed_non_cached_release_marks_in_use_cached_for_close(
    pool: Pool,
) -> None:
    holder = pool.acquire(KEY, CONFIG)
    other = pool.acquire(KEY, CONFIG)
    pool.release(other, failed=True)
    assert holder.client.close_count == 0
    pool.release(holder)
    assert holder.client.close_count == 1


def test_the_read_path_is_part_of_the_key(factory: Factory) -> None:
    """A consumer pooled for the C fast path never serves a query that asked for the Python
    path ('fastPath.enabled=false'), and the factory is told which one to build."""
    fast = KEY._replace(fast_path=True)
    assert fast != KEY
    pool = LeasePool(factory, CONSUMERS)
    lease = pool.acquire(fast, CONFIG)
    pool.release(lease)
    other = pool.acquire(KEY, CONFIG)
    assert other.client is not lease.client
    assert [key.fast_path for key in factory.keys] == [True, False]


def test_logs_never_contain_config_values(
    factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    pool = LeasePool(factory, CONSUMERS, capacity=1)
    with caplog.at_level(logging.DEBUG, logger=cp.__name__):
        held = pool.acquire(KEY, CONFIG)
        pool.acquire(KEY2, CONFIG)  # overflow warning
        pool.release(pool.acquire(KEY, CONFIG))
        pool.release(held, failed=True)
        pool.log_stats()
    assert caplog.records, "expected DEBUG/INFO/WARNING records to inspect"
    assert "orders-0" in caplog.text
    assert SECRET not in caplog.text and "bootstrap" not in caplog.text


def test_stats_count_every_outcome(pool: Pool, clock: FakeClock) -> None:
    a = pool.acquire(KEY, CONFIG)  # miss, creation
    b = pool.acquire(KEY, CONFIG)  # miss (in use), creation
    pool.release(b)  # close
    pool.release(a)
    pool.release(pool.acquire(KEY, CONFIG))  # hit
    pool.release(pool.acquire(KEY2, CONFIG))  # miss, creation
    held = pool.acquire(KEY3, CONFIG)  # miss, creation
    clock.now += 301.0
    pool.evict_idle()  # evicts + closes KEY and KEY2
    assert pool.stats() == PoolStats(
        hits=1, misses=4, creations=4, evictions=2, closes=3, size=1, in_use=1
    )
    pool.release(held)


def test_the_key_names_the_partition_never_the_config() -> None:
    assert str(KEY) == "kd-executor/orders-0"
    packed = KEY._replace(assignment=(("orders", 0), ("orders", 1), ("orders", 2)))
    assert str(packed) == "kd-executor/orders-0 (+2 more)"
    assert SECRET not in str(KEY) and SECRET not in repr(KEY)


@pytest.fixture
def fresh_global_pool() -> Iterator[None]:
    cp._process_pool.local.reset()
    yield
    cp._process_pool.local.reset()


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_pool_has_spark_s_defaults_and_takes_the_query_s_limits(factory: Factory) -> None:
    pool = cp.get_pool(factory)
    assert (pool._capacity, pool._idle_timeout_s) == (64, 300.0)
    assert cp.get_pool(factory, capacity=7, idle_timeout_s=5.0) is pool
    assert (pool._capacity, pool._idle_timeout_s) == (7, 5.0)


# --- packed tasks: adoption -------------------------------------------------------------------


def packed(*partitions: int, **changes: Any) -> PoolKey:
    """The key of a packed task of ``orders``' ``partitions`` (as read.py builds it)."""
    return KEY._replace(assignment=tuple(("orders", p) for p in sorted(partitions)), **changes)


def sparse_micro_batches(partitions: int, batches: int, seed: int) -> Iterator[list[PoolKey]]:
    """The packed tasks' keys of ``batches`` micro-batches of a sparse stream, planned as the
    driver plans them (pack_ranges, parallelism 2): each partition has records in a micro-batch
    with probability 0.3, so the tasks' partition sets change from one to the next."""
    rnd = random.Random(seed)
    for b in range(batches):
        ranges = [
            OffsetRange(
                "orders", p, 100 * b, 100 * b + (rnd.randint(1, 50) if rnd.random() < 0.3 else 0)
            )
            for p in range(partitions)
        ]
        tasks = pack_ranges(ranges, PackingSettings(parallelism=2))
        yield [packed(*(r.partition for r in task)) for task in tasks if len(task) > 1]


def test_packed_tasks_of_a_sparse_stream_adopt_idle_consumers_instead_of_piling_them_up(
    factory: Factory,
) -> None:
    """40 partitions, parallelism 2, a sparse stream: the packed tasks' partition sets rarely
    recur, so exact-key hits are rare. The worker's pool adopts an idle packed consumer that
    shares partitions instead of making one more: creations and idle consumers stay few (they
    grew to the capacity before)."""
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    keys: set[PoolKey] = set()
    for tasks in sparse_micro_batches(40, 100, seed=7):
        for key in tasks:
            keys.add(key)
            pool.release(pool.acquire(key, CONFIG))
    stats = pool.stats()
    assert len(keys) > 3 * UNRELATED_PACKED_IDLE  # premise: the keys rarely recur
    assert stats.creations <= UNRELATED_PACKED_IDLE
    assert stats.size <= UNRELATED_PACKED_IDLE
    assert stats.adoptions >= stats.misses - UNRELATED_PACKED_IDLE


def test_a_stable_packing_keeps_its_own_consumers(factory: Factory) -> None:
    """Busy partitions packed alike batch after batch: each task's key recurs, and a worker
    that serves both tasks in turn keeps a consumer (and its queue) for each: hits, never an
    adoption of the other task's consumer."""
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    first, second = packed(*range(0, 20)), packed(*range(20, 40))
    held: dict[PoolKey, list[FakeConsumer]] = {first: [], second: []}
    for _ in range(10):
        for key in (first, second):
            lease = pool.acquire(key, CONFIG)
            held[key].append(lease.client)
            pool.release(lease)
    assert pool.stats().creations == 2
    assert pool.stats().adoptions == 0
    assert all(len(set(map(id, clients))) == 1 for clients in held.values())


def test_the_idle_consumer_sharing_most_partitions_is_adopted(factory: Factory) -> None:
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    for key in (packed(1, 2), packed(3, 4, 5), packed(6, 7)):
        pool.release(pool.acquire(key, CONFIG))
    adopter = pool.acquire(packed(2, 4, 5), CONFIG)
    assert adopter.reused and adopter.client is factory.created[1]
    assert adopter.key == packed(2, 4, 5)
    pool.release(adopter)
    # Re-keyed: the old key no longer finds it; the new one does.
    again = pool.acquire(packed(2, 4, 5), CONFIG)
    assert again.client is factory.created[1]
    pool.release(again)
    assert pool.stats().creations == 3


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(packed(1, 2, group_id="another-group"), id="another group"),
        pytest.param(packed(1, 2, config_fingerprint="another"), id="another configuration"),
        pytest.param(packed(1, 2, fast_path=True), id="another read path"),
        pytest.param(KEY._replace(partition=1), id="a task of one range"),
    ],
)
def test_only_packed_consumers_of_the_same_kind_are_adopted(
    factory: Factory, other: PoolKey
) -> None:
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    pool.release(pool.acquire(other, CONFIG))
    lease = pool.acquire(packed(1, 2, 3), CONFIG)
    assert lease.client is not factory.created[0]
    assert pool.stats().adoptions == 0


def test_a_task_of_one_range_never_adopts_a_packed_consumer(factory: Factory) -> None:
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    pool.release(pool.acquire(packed(0, 1), CONFIG))
    lease = pool.acquire(KEY, CONFIG)
    assert lease.client is not factory.created[0]


def test_unrelated_packed_tasks_get_new_consumers_up_to_a_bound_then_the_least_recent_one(
    factory: Factory,
) -> None:
    """Packed tasks that share no partition with any idle consumer (other tasks of a stable
    packing, served in turn) get consumers of their own, up to UNRELATED_PACKED_IDLE; beyond,
    the least recently used idle one is adopted."""
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    for i in range(UNRELATED_PACKED_IDLE):
        pool.release(pool.acquire(packed(2 * i, 2 * i + 1), CONFIG))
    assert pool.stats().creations == UNRELATED_PACKED_IDLE
    lease = pool.acquire(packed(1000, 1001), CONFIG)
    assert lease.client is factory.created[0]
    assert pool.stats().creations == UNRELATED_PACKED_IDLE


def test_a_reattempt_never_adopts(factory: Factory) -> None:
    pool = LeasePool(factory, CONSUMERS, reaper=False)
    pool.release(pool.acquire(packed(1, 2), CONFIG))
    retry = pool.acquire(packed(1, 2, 3), CONFIG, reattempt=True)
    assert retry.client is not factory.created[0]
    assert factory.created[0].close_count == 0


# --- what idle consumers hold -----------------------------------------------------------------


def test_idle_consumers_prefetch_is_bounded_by_the_task_memory_budget(factory: Factory) -> None:
    """A worker that served many partitions of 1 MB records: each idle consumer holds about a
    batch budget of prefetched records. The pool keeps at most the budget's worth idle,
    closing the least recently used beyond it, not 64 of them."""
    budget = 16 * 2**20
    pool = LeasePool(factory, CONSUMERS, idle_bytes=12 * budget, reaper=False)
    for partition in range(40):
        lease = pool.acquire(KEY._replace(partition=partition), CONFIG)
        lease.client.prefetched = budget
        pool.release(lease)
    assert pool.stats().size == 12
    assert [c.close_count for c in factory.created] == [1] * 28 + [0] * 12


def test_idle_consumers_of_small_records_are_bounded_by_the_capacity_only(
    factory: Factory,
) -> None:
    pool = LeasePool(factory, CONSUMERS, idle_bytes=12 * 16 * 2**20, reaper=False)
    for partition in range(40):
        lease = pool.acquire(KEY._replace(partition=partition), CONFIG)
        lease.client.prefetched = 16 * 100  # queued.min.messages records of 100 bytes
        pool.release(lease)
    assert pool.stats().size == 40


@pytest.mark.parametrize(
    ("record_bytes", "expected"),
    [
        pytest.param(None, 16 * 2**20, id="nothing read yet: the byte bound"),
        pytest.param(100.0, 1600, id="small records: queued.min.messages of them"),
        pytest.param(2.0**20, 16 * 2**20, id="1 MB records: the byte bound"),
    ],
)
def test_an_idle_consumer_s_prefetch_estimate(record_bytes: float | None, expected: int) -> None:
    consumer = PartitionConsumer(object())  # type: ignore[arg-type]
    consumer.queue_records, consumer.queue_bytes = 16, 16 * 2**20
    consumer.record_bytes = record_bytes
    assert consumer.idle_prefetch_bytes() == expected


@pytest.mark.parametrize("user", [{}, {"queued.min.messages": "1000"}])
def test_a_new_consumer_knows_its_queue_bounds_from_its_config(user: dict[str, str]) -> None:
    config = executor_consumer_config(
        {"bootstrap.servers": "127.0.0.1:1", **user},
        group_id="kd-executor",
        isolation_level="read_uncommitted",
        max_batch_bytes=4 * 2**20,
    )
    made = read._new_consumer(KEY, KafkaConfig(config))
    try:
        assert made.queue_records == int(user.get("queued.min.messages", IDLE_QUEUE_RECORDS))
        assert made.queue_bytes == 4 * 2**20
    finally:
        made.close()


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_pool_takes_the_idle_bytes_bound(factory: Factory) -> None:
    pool = cp.get_pool(factory, idle_bytes=1234)
    assert pool._idle_bytes == 1234


@pytest.mark.usefixtures("fresh_global_pool")
def test_a_read_bounds_idle_consumers_by_its_task_memory_budget() -> None:
    """The worker's pool keeps idle consumers' prefetch within a task's memory budget: the
    twelve batches of maxBatchBytes that taskMemoryBudget stands for."""
    config = executor_consumer_config(
        {"bootstrap.servers": "127.0.0.1:1"},
        group_id="kd-executor",
        isolation_level="read_uncommitted",
        max_batch_bytes=2 * 2**20,
    )
    settings = ExecutorSettings(
        consumer_config=KafkaConfig(config), poll_timeout_ms=1000, fail_on_data_loss=True,
        batch_size=100, include_headers=False, cache_enabled=True, cache_capacity=64,
        cache_timeout_s=300.0, fast_path=False, max_batch_bytes=2 * 2**20,
    )  # fmt: skip
    with read._consumer(settings, KEY, settings.consumer_config):
        pass
    pool = cp.get_pool(read._new_consumer)
    assert pool._idle_bytes == BATCHES_PER_TASK_BUDGET * 2 * 2**20
    pool.close_all()
