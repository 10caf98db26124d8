"""Unit tests for kafka_direct.consumer_pool: KafkaDataConsumer acquire/release rules, no broker."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Generator, Mapping
from typing import Any

import pytest

from kafka_direct.consumer import pool as cp
from kafka_direct.consumer.pool import ConsumerPool, Lease, PoolKey, PoolStats, config_fingerprint
from kafka_direct.errors import ConfigurationError, KafkaDirectError

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
    def __init__(self, config: Mapping[str, str], ident: int, fail_close: bool = False) -> None:
        self.config = dict(config)
        self.ident = ident
        self.close_count = 0
        self.holders = 0
        self.guard = threading.Lock()
        self.fail_close = fail_close

    def close(self) -> None:
        self.close_count += 1
        if self.fail_close:
            raise RuntimeError("broker went away while leaving the group")

    def __repr__(self) -> str:
        return f"FakeConsumer#{self.ident}"


class Factory:
    def __init__(self, fail_close: bool = False) -> None:
        self.created: list[FakeConsumer] = []
        self.keys: list[PoolKey] = []
        self.fail_close = fail_close
        self.fail_next = False
        self._lock = threading.Lock()

    def __call__(self, key: PoolKey, config: Mapping[str, str]) -> FakeConsumer:
        with self._lock:
            self.keys.append(key)
            if self.fail_next:
                self.fail_next = False
                raise KafkaDirectError("cannot create consumer")
            consumer = FakeConsumer(config, len(self.created), self.fail_close)
            self.created.append(consumer)
            return consumer


class YieldingDict(OrderedDict[PoolKey, Any]):
    """The pool's map, yielding the GIL after each lookup to widen check-then-act race windows."""

    def get(self, key: PoolKey, default: Any = None) -> Any:
        value = super().get(key, default)
        time.sleep(0)
        return value


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def factory() -> Factory:
    return Factory()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pool(factory: Factory, clock: FakeClock) -> ConsumerPool[FakeConsumer]:
    # The fake clock does not move by itself: expiry is driven by the test, not the reaper.
    return ConsumerPool(factory, capacity=4, idle_timeout_s=300.0, clock=clock, reaper=False)


def test_miss_then_hit_reuses_the_same_consumer(pool: ConsumerPool[FakeConsumer]) -> None:
    first = pool.acquire(KEY, CONFIG)
    assert first.cached
    pool.release(first)
    second = pool.acquire(KEY, CONFIG)
    assert second.cached and second.consumer is first.consumer
    pool.release(second)
    assert first.consumer.close_count == 0
    assert pool.stats() == PoolStats(
        hits=1, misses=1, creations=1, evictions=0, closes=0, size=1, in_use=0
    )


def test_consumer_is_built_from_the_given_config(
    pool: ConsumerPool[FakeConsumer], factory: Factory
) -> None:
    lease = pool.acquire(KEY, CONFIG)
    assert lease.consumer.config == CONFIG
    assert lease.key == KEY


def test_in_use_cached_consumer_is_never_shared(pool: ConsumerPool[FakeConsumer]) -> None:
    holder = pool.acquire(KEY, CONFIG)
    other = pool.acquire(KEY, CONFIG)
    assert holder.cached and not other.cached
    assert other.consumer is not holder.consumer
    pool.release(other)
    assert other.consumer.close_count == 1
    assert holder.consumer.close_count == 0
    pool.release(holder)
    again = pool.acquire(KEY, CONFIG)
    assert again.consumer is holder.consumer and again.cached


def test_reattempt_closes_idle_cached_consumer_and_returns_non_cached(
    pool: ConsumerPool[FakeConsumer],
) -> None:
    old = pool.acquire(KEY, CONFIG)
    pool.release(old)
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert not retry.cached
    assert retry.consumer is not old.consumer
    assert old.consumer.close_count == 1
    assert pool.stats().size == 0
    pool.release(retry)
    assert retry.consumer.close_count == 1
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.cached and fresh.consumer not in (old.consumer, retry.consumer)


def test_reattempt_marks_in_use_cached_consumer_for_close(
    pool: ConsumerPool[FakeConsumer],
) -> None:
    holder = pool.acquire(KEY, CONFIG)
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert not retry.cached
    assert holder.consumer.close_count == 0  # never closed under its holder's feet
    pool.release(retry)
    pool.release(holder)
    assert holder.consumer.close_count == 1
    assert pool.stats().size == 0
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.consumer is not holder.consumer and fresh.cached


@pytest.mark.parametrize("cached_lease_fails", [True, False], ids=["cached", "non-cached"])
def test_failed_release_closes_and_invalidates_the_key(
    pool: ConsumerPool[FakeConsumer], cached_lease_fails: bool
) -> None:
    cached = pool.acquire(KEY, CONFIG)
    if cached_lease_fails:
        failing = cached
    else:
        failing = pool.acquire(KEY, CONFIG)
        pool.release(cached)  # idle now, but its key is about to be invalidated
    assert failing.cached is cached_lease_fails
    pool.release(failing, failed=True)
    assert failing.consumer.close_count == 1
    assert cached.consumer.close_count == 1
    assert pool.stats().size == 0
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.cached and fresh.consumer is not cached.consumer


def test_failed_non_cached_release_marks_in_use_cached_for_close(
    pool: ConsumerPool[FakeConsumer],
) -> None:
    holder = pool.acquire(KEY, CONFIG)
    other = pool.acquire(KEY, CONFIG)
    pool.release(other, failed=True)
    assert holder.consumer.close_count == 0
    pool.release(holder)
    assert holder.consumer.close_count == 1


def test_capacity_evicts_least_recently_used_idle_entry(factory: Factory) -> None:
    pool = ConsumerPool(factory, capacity=2)
    first, second = pool.acquire(KEY, CONFIG), pool.acquire(KEY2, CONFIG)
    pool.release(first)
    pool.release(second)
    pool.release(pool.acquire(KEY, CONFIG))  # KEY is now more recent than KEY2
    third = pool.acquire(KEY3, CONFIG)
    assert third.cached
    assert second.consumer.close_count == 1
    assert first.consumer.close_count == 0
    assert pool.stats().size == 2
    assert pool.stats().evictions == 1


def test_capacity_overflows_when_everything_is_in_use(
    factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    pool = ConsumerPool(factory, capacity=1)
    with caplog.at_level(logging.WARNING, logger=cp.__name__):
        first = pool.acquire(KEY, CONFIG)
        second = pool.acquire(KEY2, CONFIG)
        third = pool.acquire(KEY3, CONFIG)
    assert first.cached and second.cached and third.cached
    assert all(c.close_count == 0 for c in factory.created)
    assert pool.stats().size == 3
    overflow_warnings = [r for r in caplog.records if "over capacity" in r.getMessage()]
    assert len(overflow_warnings) == 1  # rate-limited, not one per acquire
    for lease in (first, second, third):
        pool.release(lease)  # the pool shrinks back to capacity as leases come home
    stats = pool.stats()
    assert stats.size == 1 and stats.evictions == 2
    assert [c.close_count for c in factory.created] == [1, 1, 0]
    assert pool.acquire(KEY3, CONFIG).consumer is third.consumer


@pytest.mark.parametrize(
    ("release_order", "evicted"),
    [((KEY, KEY2), KEY), ((KEY2, KEY), KEY2)],
    ids=["KEY-released-first", "KEY2-released-first"],
)
def test_recency_is_the_last_release(
    factory: Factory, release_order: tuple[PoolKey, PoolKey], evicted: PoolKey
) -> None:
    pool = ConsumerPool(factory, capacity=2)
    leases = {k: pool.acquire(k, CONFIG) for k in (KEY, KEY2)}
    for k in release_order:
        pool.release(leases[k])
    pool.acquire(KEY3, CONFIG)
    assert {k: lease.consumer.close_count for k, lease in leases.items()} == {
        k: int(k == evicted) for k in (KEY, KEY2)
    }


def test_shrinking_capacity_evicts_idle_entries(factory: Factory) -> None:
    pool = ConsumerPool(factory, capacity=3)
    leases = [pool.acquire(k, CONFIG) for k in (KEY, KEY2, KEY3)]
    for lease in leases:
        pool.release(lease)
    pool.configure(capacity=1)
    assert pool.stats().size == 1
    assert [c.close_count for c in factory.created] == [1, 1, 0]


def test_idle_timeout_closes_stale_consumers(
    pool: ConsumerPool[FakeConsumer], clock: FakeClock
) -> None:
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    clock.now += 299.0
    pool.evict_idle()
    assert lease.consumer.close_count == 0
    again = pool.acquire(KEY, CONFIG)
    assert again.consumer is lease.consumer
    pool.release(again)  # idle clock restarts at release
    clock.now += 300.5
    pool.evict_idle()
    assert lease.consumer.close_count == 1
    assert pool.stats().size == 0 and pool.stats().evictions == 1


def test_idle_timeout_is_checked_lazily_on_acquire(
    pool: ConsumerPool[FakeConsumer], clock: FakeClock
) -> None:
    stale = pool.acquire(KEY, CONFIG)
    pool.release(stale)
    clock.now += 301.0
    pool.release(pool.acquire(KEY2, CONFIG))
    assert stale.consumer.close_count == 1
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.consumer is not stale.consumer


def _wait(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_regression_idle_worker_kept_its_consumers_the_reaper_closes_them(factory: Factory) -> None:
    """Expiry checked only on acquire kept an idle worker's consumers (and their reconnects to
    a cluster that may be gone) until its next task: for ever in a worker that gets none."""
    pool: ConsumerPool[FakeConsumer] = ConsumerPool(factory, idle_timeout_s=0.2)
    held = pool.acquire(KEY2, CONFIG)
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    assert _wait(lambda: lease.consumer.close_count == 1)
    assert pool.stats().size == 1 and pool.stats().evictions == 1
    assert held.consumer.close_count == 0  # in use: never reaped
    assert _wait(lambda: not pool._reaper.running)  # it stops once nothing is idle
    pool.release(held)
    assert _wait(lambda: held.consumer.close_count == 1)
    assert pool.stats().size == 0


def test_a_shortened_timeout_reaps_without_waiting_for_the_old_one(factory: Factory) -> None:
    pool: ConsumerPool[FakeConsumer] = ConsumerPool(factory, idle_timeout_s=300.0)
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    assert pool._reaper.running and lease.consumer.close_count == 0
    time.sleep(0.3)
    pool.configure(idle_timeout_s=0.2)  # what the next query's consumerCache.timeoutMs does
    assert _wait(lambda: lease.consumer.close_count == 1, timeout_s=3.0)


def test_a_pool_without_a_reaper_starts_no_thread(factory: Factory) -> None:
    pool: ConsumerPool[FakeConsumer] = ConsumerPool(factory, idle_timeout_s=0.1, reaper=False)
    pool.release(pool.acquire(KEY, CONFIG))
    time.sleep(0.3)
    assert not pool._reaper.running and pool.stats().size == 1


def test_in_use_consumer_never_expires(pool: ConsumerPool[FakeConsumer], clock: FakeClock) -> None:
    holder = pool.acquire(KEY, CONFIG)
    clock.now += 10_000.0
    pool.evict_idle()
    assert holder.consumer.close_count == 0


@pytest.mark.parametrize("second_acquirer", [True, False], ids=["cached", "non-cached"])
def test_double_release_is_a_no_op(pool: ConsumerPool[FakeConsumer], second_acquirer: bool) -> None:
    lease = pool.acquire(KEY, CONFIG)
    if not second_acquirer:
        lease_nc = pool.acquire(KEY, CONFIG)
        pool.release(lease_nc)
        pool.release(lease_nc, failed=True)
        assert lease_nc.consumer.close_count == 1
        assert lease.consumer.close_count == 0  # the second release must not invalidate
        return
    pool.release(lease)
    reuse = pool.acquire(KEY, CONFIG)
    assert reuse.consumer is lease.consumer
    pool.release(lease)  # stale: must not hand the consumer back while `reuse` holds it
    concurrent = pool.acquire(KEY, CONFIG)
    assert not concurrent.cached
    pool.release(reuse)
    pool.release(reuse)
    assert lease.consumer.close_count == 0
    assert pool.stats().in_use == 0


def test_the_read_path_is_part_of_the_key(factory: Factory) -> None:
    """A consumer pooled for the C fast path never serves a query that asked for the Python
    path ('fastPath.enabled=false'), and the factory is told which one to build."""
    fast = KEY._replace(fast_path=True)
    assert fast != KEY
    pool = ConsumerPool(factory)
    lease = pool.acquire(fast, CONFIG)
    pool.release(lease)
    other = pool.acquire(KEY, CONFIG)
    assert other.consumer is not lease.consumer
    assert [key.fast_path for key in factory.keys] == [True, False]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"x": "1", "y": "2"}, {"y": "2", "x": "1"}, True),
        ({"x": "1"}, {"x": "2"}, False),
        ({"x": "1"}, {"x": "1", "y": "2"}, False),
        ({"sasl.password": "a"}, {"sasl.password": "b"}, False),
        ({"ab": "c"}, {"a": "bc"}, False),
        ({}, {}, True),
    ],
)
def test_config_fingerprint(a: dict[str, str], b: dict[str, str], same: bool) -> None:
    assert (config_fingerprint(a) == config_fingerprint(b)) is same


def test_config_fingerprint_hides_secrets() -> None:
    fingerprint = config_fingerprint(CONFIG)
    assert len(fingerprint) == 64
    int(fingerprint, 16)  # a hex digest, nothing else
    assert SECRET not in fingerprint and "sasl" not in fingerprint
    assert SECRET not in str(KEY)


def test_logs_never_contain_config_values(
    factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    pool = ConsumerPool(factory, capacity=1)
    with caplog.at_level(logging.DEBUG, logger=cp.__name__):
        held = pool.acquire(KEY, CONFIG)
        pool.acquire(KEY2, CONFIG)  # overflow warning
        pool.release(pool.acquire(KEY, CONFIG))
        pool.release(held, failed=True)
        pool.log_stats()
    assert caplog.records, "expected DEBUG/INFO/WARNING records to inspect"
    assert "orders-0" in caplog.text
    assert SECRET not in caplog.text and "bootstrap" not in caplog.text


def test_stats_count_every_outcome(pool: ConsumerPool[FakeConsumer], clock: FakeClock) -> None:
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


def test_lease_context_manager_releases_normally(pool: ConsumerPool[FakeConsumer]) -> None:
    with pool.lease(KEY, CONFIG) as lease:
        assert isinstance(lease, Lease) and pool.stats().in_use == 1
    assert pool.stats().in_use == 0 and lease.consumer.close_count == 0
    with pool.lease(KEY, CONFIG) as again:
        assert again.consumer is lease.consumer


def test_lease_context_manager_fails_the_lease_on_exception(
    pool: ConsumerPool[FakeConsumer],
) -> None:
    with pytest.raises(KafkaDirectError, match="boom"), pool.lease(KEY, CONFIG) as lease:
        raise KafkaDirectError("boom")
    assert lease.consumer.close_count == 1
    assert pool.stats().size == 0


def test_lease_context_manager_treats_generator_close_as_clean(
    pool: ConsumerPool[FakeConsumer],
) -> None:
    def read() -> Generator[int, None, None]:
        with pool.lease(KEY, CONFIG):
            yield from range(10)

    rows = read()
    assert next(rows) == 0
    rows.close()  # Spark stopped consuming early (e.g. LIMIT); not a failure
    assert pool.stats() == PoolStats(
        hits=0, misses=1, creations=1, evictions=0, closes=0, size=1, in_use=0
    )


def test_invalidate_and_close_all(pool: ConsumerPool[FakeConsumer]) -> None:
    idle, held = pool.acquire(KEY, CONFIG), pool.acquire(KEY2, CONFIG)
    pool.release(idle)
    pool.invalidate(KEY)
    assert idle.consumer.close_count == 1
    pool.invalidate(KEY3)  # nothing cached: harmless
    idle2 = pool.acquire(KEY3, CONFIG)
    pool.release(idle2)
    pool.close_all()
    assert idle2.consumer.close_count == 1
    assert held.consumer.close_count == 0
    pool.release(held)
    assert held.consumer.close_count == 1
    assert pool.stats().size == 0


def test_failing_close_is_logged_and_does_not_break_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = ConsumerPool(Factory(fail_close=True))
    with caplog.at_level(logging.WARNING, logger=cp.__name__):
        holder = pool.acquire(KEY, CONFIG)
        other = pool.acquire(KEY, CONFIG)
        pool.release(other)  # close raises inside
        pool.release(holder, failed=True)
    assert other.consumer.close_count == 1 and holder.consumer.close_count == 1
    close_warnings = [r for r in caplog.records if "consumer failed" in r.getMessage()]
    assert len(close_warnings) == 2 and all(r.levelno == logging.WARNING for r in close_warnings)
    assert pool.stats().closes == 2
    assert pool.acquire(KEY, CONFIG).cached


def test_factory_failure_releases_the_reservation(
    pool: ConsumerPool[FakeConsumer], factory: Factory
) -> None:
    factory.fail_next = True
    with pytest.raises(KafkaDirectError, match="cannot create"):
        pool.acquire(KEY, CONFIG)
    assert pool.stats().size == 0
    lease = pool.acquire(KEY, CONFIG)
    assert lease.cached  # not stuck behind a half-built entry


@pytest.mark.parametrize(("capacity", "idle"), [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -5.0)])
def test_invalid_limits_are_configuration_errors(
    factory: Factory, capacity: int, idle: float
) -> None:
    with pytest.raises(ConfigurationError):
        ConsumerPool(factory, capacity=capacity, idle_timeout_s=idle)


@pytest.fixture
def fresh_global_pool() -> Generator[None, None, None]:
    cp._process_pool.reset()
    yield
    cp._process_pool.reset()


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_pool_is_a_process_singleton(factory: Factory) -> None:
    pool = cp.get_pool(factory)
    assert cp.get_pool(Factory()) is pool
    lease = pool.acquire(KEY, CONFIG)
    assert lease.consumer in factory.created  # the first caller's factory is kept
    pool.release(lease)
    assert cp.get_pool(factory, capacity=7, idle_timeout_s=5.0) is pool
    assert (pool._capacity, pool._idle_timeout_s) == (7, 5.0)


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_pool_is_fork_safe(monkeypatch: pytest.MonkeyPatch, factory: Factory) -> None:
    parent = cp.get_pool(factory)
    parent_lease = parent.acquire(KEY, CONFIG)
    parent.release(parent_lease)
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
    child = cp.get_pool(factory)
    assert child is not parent
    assert parent_lease.consumer.close_count == 0  # the parent's consumers are not ours to close
    assert child.acquire(KEY, CONFIG).consumer is not parent_lease.consumer
    assert cp.get_pool(factory) is child
    cp._process_pool.close_at_exit()  # the child's exit only touches the child's pool
    assert parent_lease.consumer.close_count == 0


@pytest.mark.parametrize("chaos", [False, True], ids=["plain", "reattempts-and-failures"])
def test_concurrent_acquirers_never_share_a_consumer(factory: Factory, chaos: bool) -> None:
    pool = ConsumerPool(factory, capacity=4)
    pool._entries = YieldingDict()
    threads_n, iterations = 16, 200
    errors: list[str] = []
    barrier = threading.Barrier(threads_n)

    def worker(index: int) -> None:
        barrier.wait()
        for i in range(iterations):
            reattempt = chaos and (i + index) % 7 == 0
            failed = chaos and (i * index) % 11 == 3
            lease = pool.acquire(KEY, CONFIG, reattempt=reattempt)
            consumer = lease.consumer
            with consumer.guard:
                consumer.holders += 1
                if consumer.holders != 1:
                    errors.append(f"{consumer!r} held by {consumer.holders} threads")
                if consumer.close_count:
                    errors.append(f"{consumer!r} handed out after close")
            time.sleep(0)  # widen the window in which a second holder would be noticed
            with consumer.guard:
                consumer.holders -= 1
            pool.release(lease, failed=failed)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # force frequent thread switches to shake out races
    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)

    assert errors == []
    stats = pool.stats()
    assert stats.hits + stats.misses == threads_n * iterations
    assert stats.creations == len(factory.created)
    assert stats.in_use == 0 and stats.size <= 1
    cached = [e.consumer for e in pool._entries.values()]
    for consumer in factory.created:
        expected = 0 if consumer in cached else 1
        assert consumer.close_count == expected, f"{consumer!r}: leaked or closed twice"
    assert stats.closes == len(factory.created) - len(cached)
    if not chaos:
        assert stats.hits > 0
