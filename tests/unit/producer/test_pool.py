"""The producer pool's rules, with fake producers and a fake clock: no broker, no Spark.

The two regression tests are named after the Spark bugs they guard:
SPARK-21869 (a cached producer closed while a task was still writing with it) and
SPARK-27042 (a retried task handed the same broken producer on every attempt).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping

import pytest

from kafka_direct.producer import pool as pp
from kafka_direct.producer.pool import ProducerKey, ProducerPool

KEY = ProducerKey("f" * 64)
OTHER = ProducerKey("e" * 64)
CONFIG = {"bootstrap.servers": "b:1"}


class FakeProducer:
    def __init__(self, n: int, config: Mapping[str, str]) -> None:
        self.n, self.config = n, dict(config)
        self.usable = True
        self.closed = 0
        self.holders = 0
        self.guard = threading.Lock()

    def close(self) -> None:
        self.closed += 1

    def __repr__(self) -> str:
        return f"FakeProducer({self.n})"


class Factory:
    def __init__(self) -> None:
        self.created: list[FakeProducer] = []
        self.fail = False

    def __call__(self, key: ProducerKey, config: Mapping[str, str]) -> FakeProducer:
        if self.fail:
            raise RuntimeError("cannot create")
        producer = FakeProducer(len(self.created), config)
        self.created.append(producer)
        return producer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def factory() -> Factory:
    return Factory()


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture()
def pool(factory: Factory, clock: FakeClock) -> ProducerPool[FakeProducer]:
    return ProducerPool(factory, idle_timeout_s=60.0, capacity=4, clock=clock, reaper=False)


@pytest.fixture()
def fresh_global_pool() -> Iterator[None]:
    pp._process_pool.reset()
    yield
    pp._process_pool.reset()


def test_a_released_producer_serves_the_next_task(pool: ProducerPool[FakeProducer]) -> None:
    first = pool.acquire(KEY, CONFIG)
    assert not first.reused and first.producer.config == CONFIG
    pool.release(first)
    second = pool.acquire(KEY, CONFIG)
    assert second.reused and second.producer is first.producer
    assert pool.stats().hits == 1 and pool.stats().creations == 1


def test_a_producer_is_never_lent_to_two_holders(pool: ProducerPool[FakeProducer]) -> None:
    a = pool.acquire(KEY, CONFIG)
    b = pool.acquire(KEY, CONFIG)
    assert a.producer is not b.producer
    pool.release(a)
    pool.release(b)
    assert pool.stats().idle == 2


def test_keys_do_not_share(pool: ProducerPool[FakeProducer]) -> None:
    pool.release(pool.acquire(KEY, CONFIG))
    assert pool.acquire(OTHER, CONFIG).producer.n == 1


def test_spark_21869_a_producer_in_use_is_never_closed(
    pool: ProducerPool[FakeProducer], clock: FakeClock
) -> None:
    """Spark expired a cached producer counted from its acquisition, while a long task still
    wrote with it. Here only idle producers expire, counted from their release."""
    held = pool.acquire(KEY, CONFIG)
    clock.now += 3600  # an hour-long task
    pool.evict_idle()
    pool.release(pool.acquire(OTHER, CONFIG))  # other traffic runs the expiry checks
    for _ in range(10):  # and capacity pressure
        pool.release(pool.acquire(ProducerKey(str(clock.now)), CONFIG))
        clock.now += 1
    pool.close_all()  # even closing the pool
    assert held.producer.closed == 0
    pool.release(held)
    assert held.producer.closed == 1  # close_all's mark: closed at release, not before


def test_spark_21869_expiry_counts_from_release(
    pool: ProducerPool[FakeProducer], clock: FakeClock
) -> None:
    held = pool.acquire(KEY, CONFIG)
    clock.now += 3600
    pool.release(held)
    clock.now += 59
    pool.evict_idle()
    assert held.producer.closed == 0
    again = pool.acquire(KEY, CONFIG)
    assert again.producer is held.producer
    pool.release(again)
    clock.now += 61
    pool.evict_idle()
    assert held.producer.closed == 1 and pool.stats().idle == 0


def test_spark_27042_a_retried_task_gets_a_new_producer(pool: ProducerPool[FakeProducer]) -> None:
    """Spark handed a retried task the same cached (broken) producer on every attempt."""
    first = pool.acquire(KEY, CONFIG)
    pool.release(first)  # the task failed for a reason the producer did not see
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert retry.producer is not first.producer
    assert first.producer.closed == 1
    pool.release(retry)
    assert pool.acquire(KEY, CONFIG).producer is retry.producer


def test_spark_27042_a_retry_closes_producers_in_use_at_their_release(
    pool: ProducerPool[FakeProducer],
) -> None:
    busy = pool.acquire(KEY, CONFIG)  # another holder of the key, still writing
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert busy.producer.closed == 0
    pool.release(busy)
    assert busy.producer.closed == 1
    pool.release(retry)
    assert retry.producer.closed == 0 and pool.stats().idle == 1


def test_a_failed_task_closes_its_producer(pool: ProducerPool[FakeProducer]) -> None:
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease, failed=True)
    assert lease.producer.closed == 1
    assert pool.acquire(KEY, CONFIG).producer is not lease.producer


def test_a_producer_that_saw_a_fatal_error_is_never_handed_out_again(
    pool: ProducerPool[FakeProducer],
) -> None:
    lease = pool.acquire(KEY, CONFIG)
    lease.producer.usable = False  # a fatal error during a task that still succeeded
    pool.release(lease)
    assert lease.producer.closed == 1 and pool.stats().idle == 0
    # Turned unusable while idle (librdkafka's threads report fatal errors at any time).
    idle = pool.acquire(KEY, CONFIG)
    pool.release(idle)
    idle.producer.usable = False
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.producer is not idle.producer and idle.producer.closed == 1


def test_the_lease_context_releases_failed_on_an_exception(
    pool: ProducerPool[FakeProducer],
) -> None:
    with pytest.raises(RuntimeError), pool.lease(KEY, CONFIG) as lease:
        raise RuntimeError("delivery failed")
    assert lease.producer.closed == 1
    with pool.lease(KEY, CONFIG) as ok:
        pass
    assert ok.producer.closed == 0 and pool.stats().idle == 1


def test_capacity_closes_the_least_recently_released(factory: Factory, clock: FakeClock) -> None:
    pool = ProducerPool(factory, capacity=2, clock=clock, reaper=False)
    leases = [pool.acquire(ProducerKey(str(i)), CONFIG) for i in range(3)]
    for lease in leases:
        clock.now += 1
        pool.release(lease)
    assert [p.closed for p in factory.created] == [1, 0, 0]


def test_double_release_is_a_no_op(pool: ProducerPool[FakeProducer]) -> None:
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    pool.release(lease, failed=True)
    assert lease.producer.closed == 0 and pool.stats().idle == 1


def test_a_factory_failure_leaves_the_pool_consistent(
    pool: ProducerPool[FakeProducer], factory: Factory
) -> None:
    factory.fail = True
    with pytest.raises(RuntimeError):
        pool.acquire(KEY, CONFIG)
    assert pool.stats().in_use == 0
    factory.fail = False
    pool.release(pool.acquire(KEY, CONFIG))


def test_a_failing_close_is_logged_and_ignored(
    pool: ProducerPool[FakeProducer], caplog: pytest.LogCaptureFixture
) -> None:
    lease = pool.acquire(KEY, CONFIG)

    def boom() -> None:
        raise RuntimeError("close failed")

    lease.producer.close = boom  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        pool.release(lease, failed=True)
    assert "Closing a pooled Kafka producer failed" in caplog.text


def test_the_reaper_closes_idle_producers_while_the_worker_waits(factory: Factory) -> None:
    pool = ProducerPool(factory, idle_timeout_s=0.2)
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    deadline = time.monotonic() + 5
    while not lease.producer.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lease.producer.closed == 1 and pool.stats().idle == 0
    deadline = time.monotonic() + 5
    while pool._reaper.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pool._reaper.running  # it stops once nothing is idle


def test_logs_name_keys_by_fingerprint_never_config_values(
    pool: ProducerPool[FakeProducer], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="kafka_direct.producer.pool"):
        pool.release(pool.acquire(KEY, {"sasl.password": "hunter2"}))
        pool.release(pool.acquire(KEY, {"sasl.password": "hunter2"}))
    assert "hunter2" not in caplog.text and "python/ffffffffffff" in caplog.text


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_producer_pool_is_a_process_singleton(factory: Factory) -> None:
    pool = pp.get_producer_pool(factory)
    assert pp.get_producer_pool(Factory()) is pool
    assert pp.get_producer_pool(factory, idle_timeout_s=5.0, capacity=3) is pool
    assert (pool._idle_timeout_s, pool._capacity) == (5.0, 3)


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_producer_pool_is_fork_safe(monkeypatch: pytest.MonkeyPatch, factory: Factory) -> None:
    parent = pp.get_producer_pool(factory)
    lease = parent.acquire(KEY, CONFIG)
    parent.release(lease)
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
    child = pp.get_producer_pool(factory)
    assert child is not parent
    assert child.acquire(KEY, CONFIG).producer is not lease.producer
    pp._process_pool.close_at_exit()  # the child's exit touches only the child's pool
    assert lease.producer.closed == 0  # the parent's producers are not the child's to close
    parent.close_all()


@pytest.mark.parametrize("chaos", [False, True], ids=["plain", "reattempts-and-failures"])
def test_concurrent_holders_never_share_a_producer(factory: Factory, chaos: bool) -> None:
    pool = ProducerPool(factory, capacity=4, reaper=False)
    threads_n, iterations = 12, 200
    errors: list[str] = []
    barrier = threading.Barrier(threads_n)

    def worker(index: int) -> None:
        barrier.wait()
        for i in range(iterations):
            lease = pool.acquire(KEY, CONFIG, reattempt=chaos and (i + index) % 7 == 0)
            producer = lease.producer
            with producer.guard:
                producer.holders += 1
                if producer.holders != 1:
                    errors.append(f"{producer!r} held by {producer.holders} threads")
                if producer.closed:
                    errors.append(f"{producer!r} handed out after close")
            time.sleep(0)
            with producer.guard:
                producer.holders -= 1
            pool.release(lease, failed=chaos and (i * index) % 11 == 3)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    stats = pool.stats()
    assert stats.in_use == 0 and stats.idle <= 4
    assert stats.creations == len(factory.created)
