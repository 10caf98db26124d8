"""The consumer pool's policy (Spark's ``KafkaDataConsumer`` rules) on the shared lease pool:
one cached consumer per key, an uncached one for a second holder or a reattempt, a failed read
invalidates the key. No broker. The pool's common contract (expiry, capacity, the reaper,
threads, fork safety) is tested once, in ``tests/unit/executor/test_lease_pool.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping

import pytest

from kafka_direct.config.fingerprint import config_fingerprint
from kafka_direct.consumer import pool as cp
from kafka_direct.consumer.pool import CONSUMERS, PoolKey
from kafka_direct.errors import KafkaDirectError
from kafka_direct.executor.lease_pool import LeasePool, PoolStats
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
