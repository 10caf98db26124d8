"""The producer pool's policy on the shared lease pool: many producers per key, every one of
them returned to the pool, and a producer that saw a fatal error never handed out again. Fake
producers and a fake clock: no broker, no Spark. The pool's common contract (SPARK-21869's
expiry from the release, capacity, the reaper, threads, fork safety) is tested once, in
``tests/unit/executor/test_lease_pool.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import pytest

from kafka_direct.executor.lease_pool import LeasePool
from kafka_direct.producer import pool as pp
from kafka_direct.producer.pool import PRODUCERS, ProducerKey
from tests.unit.fakes import FakeClock

KEY = ProducerKey("f" * 64)
OTHER = ProducerKey("e" * 64)
CONFIG = {"bootstrap.servers": "b:1"}


class FakeProducer:
    def __init__(self, n: int, config: Mapping[str, str]) -> None:
        self.n, self.config = n, dict(config)
        self.usable = True
        self.closed = 0

    def close(self) -> None:
        self.closed += 1

    def __repr__(self) -> str:
        return f"FakeProducer({self.n})"


class Factory:
    def __init__(self) -> None:
        self.created: list[FakeProducer] = []

    def __call__(self, key: ProducerKey, config: Mapping[str, str]) -> FakeProducer:
        producer = FakeProducer(len(self.created), config)
        self.created.append(producer)
        return producer


Pool = LeasePool[ProducerKey, FakeProducer]


@pytest.fixture()
def pool() -> Pool:
    return LeasePool(
        Factory(),
        PRODUCERS,
        idle_timeout_s=60.0,
        capacity=4,
        clock=FakeClock().monotonic,
        reaper=False,
    )


def test_a_second_holder_gets_another_producer_and_both_are_pooled(
    pool: Pool,
) -> None:
    a, b = pool.acquire(KEY, CONFIG), pool.acquire(KEY, CONFIG)
    assert a.cached and b.cached and a.client is not b.client
    pool.release(a)
    pool.release(b)
    assert pool.stats().idle == 2
    assert pool.acquire(KEY, CONFIG).client is b.client  # the most recently released first


def test_spark_27042_a_retried_task_gets_a_new_pooled_producer(
    pool: Pool,
) -> None:
    first = pool.acquire(KEY, CONFIG)
    pool.release(first)
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert retry.cached and not retry.reused and first.client.closed == 1
    pool.release(retry)
    assert pool.acquire(KEY, CONFIG).client is retry.client


def test_a_failed_task_closes_only_its_own_producer(pool: Pool) -> None:
    idle = pool.acquire(KEY, CONFIG)
    failing = pool.acquire(KEY, CONFIG)
    pool.release(idle)
    pool.release(failing, failed=True)
    assert (failing.client.closed, idle.client.closed) == (1, 0)
    assert pool.acquire(KEY, CONFIG).client is idle.client


@pytest.mark.parametrize("when", ["while-lent", "while-idle"])
def test_a_producer_that_saw_a_fatal_error_is_never_handed_out_again(pool: Pool, when: str) -> None:
    lease = pool.acquire(KEY, CONFIG)
    if when == "while-lent":
        lease.client.usable = False  # a fatal error during a task that still succeeded
        pool.release(lease)
    else:
        pool.release(lease)
        lease.client.usable = False  # librdkafka's threads report fatal errors at any time
    fresh = pool.acquire(KEY, CONFIG)
    assert fresh.client is not lease.client and lease.client.closed == 1
    assert pool.stats().size == 1


def test_logs_name_keys_by_fingerprint_never_config_values(
    pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="kafka_direct.producer.pool"):
        pool.release(pool.acquire(KEY, {"sasl.password": "hunter2"}))
        pool.release(pool.acquire(KEY, {"sasl.password": "hunter2"}))
    assert "hunter2" not in caplog.text and "python/ffffffffffff" in caplog.text


@pytest.fixture()
def fresh_global_pool() -> Iterator[None]:
    pp._process_pool.local.reset()
    yield
    pp._process_pool.local.reset()


@pytest.mark.usefixtures("fresh_global_pool")
def test_get_producer_pool_has_spark_s_defaults_and_takes_the_write_s_limits() -> None:
    pool = pp.get_producer_pool(Factory())
    assert (pool._capacity, pool._idle_timeout_s) == (8, 600.0)
    assert pp.get_producer_pool(Factory(), idle_timeout_s=5.0, capacity=3) is pool
    assert (pool._idle_timeout_s, pool._capacity) == (5.0, 3)
