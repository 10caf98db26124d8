"""The lease pool's contract, shared by the consumer and the producer pools: fake clients and a
fake clock, no broker, no Spark. Every test runs under both shapes of policy (one client per key,
as consumers; many per key, as producers); the wings' own rules are in
``tests/unit/consumer/test_pool.py`` and ``tests/unit/producer/test_pool.py``.

The regression tests are named after the Spark bugs they guard: SPARK-21869 (a cached client
closed while a task still used it) and SPARK-27042 (a retried task handed the same broken client
on every attempt).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.executor.lease_pool import Lease, LeasePool, Policy, PoolStats, WorkerPool
from tests.unit.fakes import FakeClock

log = logging.getLogger("tests.lease_pool")
SECRET = "hunter2-very-secret"
CONFIG = {"bootstrap.servers": "localhost:9092", "sasl.password": SECRET}
KEY, KEY2, KEY3 = "orders-0", "orders-1", "orders-2"


class FakeClient:
    def __init__(self, config: Mapping[str, str], ident: int, fail_close: bool) -> None:
        self.config = dict(config)
        self.ident = ident
        self.close_count = 0
        self.usable = True
        self.holders = 0
        self.guard = threading.Lock()
        self.fail_close = fail_close

    def close(self) -> None:
        self.close_count += 1
        if self.fail_close:
            raise RuntimeError("broker went away while closing")

    def __repr__(self) -> str:
        return f"FakeClient#{self.ident}"


class Factory:
    def __init__(self, fail_close: bool = False) -> None:
        self.created: list[FakeClient] = []
        self.fail_close = fail_close
        self.fail_next = False
        self._lock = threading.Lock()

    def __call__(self, key: str, config: Mapping[str, str]) -> FakeClient:
        with self._lock:
            if self.fail_next:
                self.fail_next = False
                raise KafkaDirectError("cannot create a client")
            client = FakeClient(config, len(self.created), self.fail_close)
            self.created.append(client)
            return client


def _usable(client: FakeClient) -> bool:
    return client.usable


#: The two shapes of policy the wings use.
POLICIES = {
    "one-per-key": Policy("client", log, capacity=4, idle_timeout_s=300.0, one_per_key=True),
    "many-per-key": Policy("client", log, capacity=4, idle_timeout_s=300.0, usable=_usable),
}

Pool = LeasePool[str, FakeClient]


@pytest.fixture(params=sorted(POLICIES))
def policy(request: pytest.FixtureRequest) -> Policy:
    return POLICIES[request.param]


@pytest.fixture
def factory() -> Factory:
    return Factory()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(factory: Factory, clock: FakeClock, policy: Policy) -> Callable[..., Pool]:
    """A pool under ``policy``; the fake clock does not move by itself (no reaper) unless asked."""

    def build(**limits: Any) -> Pool:
        limits.setdefault("clock", clock.monotonic)
        limits.setdefault("reaper", False)
        return LeasePool(factory, policy, **limits)

    return build


@pytest.fixture
def pool(make: Callable[..., Pool]) -> Pool:
    return make()


def _wait(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


# --- lending ---------------------------------------------------------------------------------


def test_a_released_client_serves_the_next_holder(pool: Pool) -> None:
    first = pool.acquire(KEY, CONFIG)
    assert first.cached and not first.reused and first.client.config == CONFIG
    pool.release(first)
    second = pool.acquire(KEY, CONFIG)
    assert second.reused and second.client is first.client and second.key == KEY
    pool.release(second)
    assert first.client.close_count == 0
    assert pool.stats() == PoolStats(
        hits=1, misses=1, creations=1, evictions=0, closes=0, size=1, in_use=0
    )


def test_a_client_is_never_lent_to_two_holders(pool: Pool) -> None:
    a, b = pool.acquire(KEY, CONFIG), pool.acquire(KEY, CONFIG)
    assert a.client is not b.client


def test_keys_do_not_share(pool: Pool) -> None:
    pool.release(pool.acquire(KEY, CONFIG))
    assert pool.acquire(KEY2, CONFIG).client.ident == 1


def test_a_failed_release_closes_the_client(pool: Pool) -> None:
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease, failed=True)
    assert lease.client.close_count == 1 and pool.stats().size == 0
    assert pool.acquire(KEY, CONFIG).client is not lease.client


def test_spark_27042_a_reattempt_never_gets_the_idle_client(pool: Pool) -> None:
    """Spark handed a retried task the same cached (broken) client on every attempt."""
    first = pool.acquire(KEY, CONFIG)
    pool.release(first)  # the task failed for a reason the client did not see
    retry = pool.acquire(KEY, CONFIG, reattempt=True)
    assert retry.client is not first.client and first.client.close_count == 1


def test_spark_27042_a_reattempt_closes_clients_in_use_at_their_release(pool: Pool) -> None:
    busy = pool.acquire(KEY, CONFIG)  # another holder of the key, still working
    pool.release(pool.acquire(KEY, CONFIG, reattempt=True))
    assert busy.client.close_count == 0  # never closed under its holder's feet
    pool.release(busy)
    assert busy.client.close_count == 1


@pytest.mark.parametrize("second_holder", [False, True], ids=["alone", "with-a-second-holder"])
def test_double_release_is_a_no_op(pool: Pool, second_holder: bool) -> None:
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    reuse = pool.acquire(KEY, CONFIG)
    assert reuse.client is lease.client
    pool.release(lease)  # stale: must not hand the client back while `reuse` holds it
    pool.release(lease, failed=True)  # nor close it
    if second_holder:
        assert pool.acquire(KEY, CONFIG).client is not reuse.client
    pool.release(reuse)
    pool.release(reuse, failed=True)
    assert lease.client.close_count == 0


def test_a_factory_failure_leaves_no_reservation(pool: Pool, factory: Factory) -> None:
    factory.fail_next = True
    with pytest.raises(KafkaDirectError, match="cannot create"):
        pool.acquire(KEY, CONFIG)
    assert pool.stats().size == 0 and pool.stats().in_use == 0
    assert pool.acquire(KEY, CONFIG).cached  # not stuck behind a half-built entry


# --- the lease context -------------------------------------------------------------------------


def test_the_lease_context_releases(pool: Pool) -> None:
    with pool.lease(KEY, CONFIG) as lease:
        assert isinstance(lease, Lease) and pool.stats().in_use == 1
    assert pool.stats().in_use == 0 and lease.client.close_count == 0
    with pool.lease(KEY, CONFIG) as again:
        assert again.client is lease.client


def test_the_lease_context_releases_failed_on_an_exception(pool: Pool) -> None:
    with pytest.raises(KafkaDirectError, match="boom"), pool.lease(KEY, CONFIG) as lease:
        raise KafkaDirectError("boom")
    assert lease.client.close_count == 1 and pool.stats().size == 0


def test_the_lease_context_takes_a_generator_closed_early_as_clean(pool: Pool) -> None:
    def read() -> Generator[int, None, None]:
        with pool.lease(KEY, CONFIG):
            yield from range(10)

    rows = read()
    assert next(rows) == 0
    rows.close()  # Spark stopped consuming early (e.g. LIMIT): not a failure
    assert pool.stats() == PoolStats(
        hits=0, misses=1, creations=1, evictions=0, closes=0, size=1, in_use=0
    )


# --- expiry, capacity, closing ---------------------------------------------------------------


def test_spark_21869_a_client_in_use_is_never_closed(pool: Pool, clock: FakeClock) -> None:
    """Spark expired a cached producer counted from its acquisition, while a long task still
    wrote with it. Here only idle clients expire, counted from their release."""
    held = pool.acquire(KEY, CONFIG)
    clock.now += 3600  # an hour-long task
    pool.evict_idle()
    for i in range(10):  # capacity pressure and other traffic running the expiry checks
        pool.release(pool.acquire(f"other-{i}", CONFIG))
        clock.now += 1
    pool.close_all()  # even closing the pool
    assert held.client.close_count == 0
    pool.release(held)
    assert held.client.close_count == 1  # close_all's mark: closed at release, not before


@pytest.mark.parametrize(
    ("idle_s", "closed"), [(299.0, 0), (300.5, 1)], ids=["before-the-timeout", "after-it"]
)
def test_expiry_counts_from_the_release(
    pool: Pool, clock: FakeClock, idle_s: float, closed: int
) -> None:
    lease = pool.acquire(KEY, CONFIG)
    clock.now += 3600
    pool.release(lease)
    clock.now += idle_s
    pool.evict_idle()
    assert lease.client.close_count == closed
    assert pool.stats() == PoolStats(
        hits=0, misses=1, creations=1, evictions=closed, closes=closed, size=1 - closed, in_use=0
    )


def test_expiry_is_also_checked_when_a_holder_comes(pool: Pool, clock: FakeClock) -> None:
    stale = pool.acquire(KEY, CONFIG)
    pool.release(stale)
    clock.now += 301.0
    pool.release(pool.acquire(KEY2, CONFIG))
    assert stale.client.close_count == 1
    assert pool.acquire(KEY, CONFIG).client is not stale.client


@pytest.mark.parametrize(
    ("release_order", "evicted"),
    [((KEY, KEY2), KEY), ((KEY2, KEY), KEY2)],
    ids=["KEY-released-first", "KEY2-released-first"],
)
def test_capacity_closes_the_least_recently_released(
    make: Callable[..., Pool], release_order: tuple[str, str], evicted: str
) -> None:
    pool = make(capacity=2)
    leases = {k: pool.acquire(k, CONFIG) for k in (KEY, KEY2)}
    for k in release_order:
        pool.release(leases[k])
    pool.release(pool.acquire(KEY3, CONFIG))
    assert {k: lease.client.close_count for k, lease in leases.items()} == {
        k: int(k == evicted) for k in (KEY, KEY2)
    }
    assert pool.stats().size == 2 and pool.stats().evictions == 1


def test_capacity_overflows_while_everything_is_in_use(
    make: Callable[..., Pool], factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    pool = make(capacity=1)
    with caplog.at_level(logging.WARNING, logger=log.name):
        leases = [pool.acquire(k, CONFIG) for k in (KEY, KEY2, KEY3)]
    assert all(lease.cached for lease in leases)
    assert all(c.close_count == 0 for c in factory.created) and pool.stats().size == 3
    overflow = [r for r in caplog.records if "over capacity" in r.getMessage()]
    assert len(overflow) == 1  # rate-limited, not one per acquire
    for lease in leases:
        pool.release(lease)  # the pool shrinks back to capacity as leases come home
    assert pool.stats().size == 1 and pool.stats().evictions == 2
    assert [c.close_count for c in factory.created] == [1, 1, 0]


def test_shrinking_the_limits_closes_idle_clients(
    make: Callable[..., Pool], factory: Factory
) -> None:
    pool = make(capacity=3)
    leases = [pool.acquire(k, CONFIG) for k in (KEY, KEY2, KEY3)]
    for lease in leases:
        pool.release(lease)
    pool.configure(capacity=1)
    assert pool.stats().size == 1
    assert [c.close_count for c in factory.created] == [1, 1, 0]


@pytest.mark.parametrize(("capacity", "idle"), [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -5.0)])
def test_invalid_limits_are_configuration_errors(
    make: Callable[..., Pool], capacity: int, idle: float
) -> None:
    with pytest.raises(ConfigurationError, match="client pool"):
        make(capacity=capacity, idle_timeout_s=idle)


# --- what idle clients hold, and adoption --------------------------------------------------------


def _holds(client: FakeClient) -> int:
    return client.ident * 10  # client 0 holds nothing, client 1 ten bytes, ...


def _with(policy: Policy, **changes: Any) -> Policy:
    return dataclasses.replace(policy, **changes)


def test_idle_bytes_close_the_least_recently_released_beyond_the_bound(
    policy: Policy, factory: Factory, clock: FakeClock
) -> None:
    pool = LeasePool(
        factory, _with(policy, idle_bytes_of=_holds, capacity=10), idle_bytes=75,
        clock=clock.monotonic, reaper=False,
    )  # fmt: skip
    leases = [pool.acquire(k, CONFIG) for k in ("k0", "k1", "k2", "k3", "k4")]
    for lease in leases:  # idle: 0, 10, 20, 30, 40 bytes
        pool.release(lease)
    # 30 + 40 fit, no more: everything released before them goes, oldest first.
    assert [c.close_count for c in factory.created] == [1, 1, 1, 0, 0]
    assert pool.stats().size == 2
    held = pool.acquire("k3", CONFIG)  # a lent client's bytes are its holder's, not idle
    pool.configure(idle_bytes=45)
    assert [c.close_count for c in factory.created] == [1, 1, 1, 0, 0]
    pool.release(held)  # 30 + 40 idle again: the least recently released goes
    assert [c.close_count for c in factory.created] == [1, 1, 1, 0, 1]


def test_no_idle_bytes_bound_by_default(policy: Policy, factory: Factory) -> None:
    pool = LeasePool(factory, _with(policy, idle_bytes_of=_holds), reaper=False)
    for key in ("k0", "k1", "k2", "k3"):
        pool.release(pool.acquire(key, CONFIG))
    assert pool.stats().size == 4


def test_a_negative_idle_bytes_bound_is_a_configuration_error(make: Callable[..., Pool]) -> None:
    with pytest.raises(ConfigurationError, match="client pool idle bytes"):
        make(idle_bytes=-1)


def _shared(have: str, want: str) -> int | None:
    """Keys "a:1,2": a family and a set; the score is what the sets share."""
    (kind, items), (kind2, items2) = have.split(":"), want.split(":")
    return len(set(items.split(",")) & set(items2.split(","))) if kind == kind2 else None


@pytest.fixture
def adopting(policy: Policy, factory: Factory, clock: FakeClock) -> Pool:
    return LeasePool(
        factory, _with(policy, adopt=_shared, adopt_unrelated_from=3, capacity=10),
        clock=clock.monotonic, reaper=False,
    )  # fmt: skip


def test_a_miss_adopts_the_idle_client_sharing_most(adopting: Pool, factory: Factory) -> None:
    for key in ("a:1,2", "a:3,4,5", "b:2,4,5", "a:6"):
        adopting.release(adopting.acquire(key, CONFIG))
    lease = adopting.acquire("a:2,4,5", CONFIG)
    assert lease.client is factory.created[1] and lease.reused and lease.key == "a:2,4,5"
    adopting.release(lease)
    again = adopting.acquire("a:2,4,5", CONFIG)  # re-keyed: a hit under its new key
    assert again.client is factory.created[1]
    stats = adopting.stats()
    assert (stats.adoptions, stats.creations, stats.hits, stats.misses) == (1, 4, 1, 5)


def test_an_adopted_client_is_never_one_in_use(adopting: Pool, factory: Factory) -> None:
    held = adopting.acquire("a:1,2", CONFIG)
    assert adopting.acquire("a:2,3", CONFIG).client is not held.client


def test_nothing_in_common_adopts_only_beyond_the_bound(adopting: Pool, factory: Factory) -> None:
    for key in ("a:1", "a:2", "a:3"):  # three idle, nothing in common with what comes
        adopting.release(adopting.acquire(key, CONFIG))
    assert adopting.acquire("a:9", CONFIG).client is factory.created[0]  # least recent
    assert adopting.stats().creations == 3


def test_nothing_in_common_below_the_bound_gets_a_new_client(
    adopting: Pool, factory: Factory
) -> None:
    for key in ("a:1", "a:2"):
        adopting.release(adopting.acquire(key, CONFIG))
    assert adopting.acquire("a:9", CONFIG).client is factory.created[2]
    assert adopting.stats().adoptions == 0


def test_a_policy_without_adoption_never_re_keys(pool: Pool, factory: Factory) -> None:
    pool.release(pool.acquire("a:1,2", CONFIG))
    assert pool.acquire("a:1,2,3", CONFIG).client is not factory.created[0]
    assert pool.stats().adoptions == 0


def test_invalidate_and_close_all(pool: Pool) -> None:
    idle, held = pool.acquire(KEY, CONFIG), pool.acquire(KEY2, CONFIG)
    pool.release(idle)
    pool.invalidate(KEY)
    assert idle.client.close_count == 1
    pool.invalidate(KEY3)  # nothing pooled: harmless
    idle2 = pool.acquire(KEY3, CONFIG)
    pool.release(idle2)
    pool.close_all()
    assert idle2.client.close_count == 1 and held.client.close_count == 0
    pool.release(held)
    assert held.client.close_count == 1 and pool.stats().size == 0


def test_a_failing_close_is_logged_and_ignored(
    policy: Policy, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    pool: Pool = LeasePool(Factory(fail_close=True), policy, clock=clock.monotonic, reaper=False)
    with caplog.at_level(logging.WARNING, logger=log.name):
        lease = pool.acquire(KEY, CONFIG)
        pool.release(lease, failed=True)  # close raises inside
    assert lease.client.close_count == 1 and pool.stats().closes == 1
    assert "Closing a pooled Kafka client failed" in caplog.text
    assert pool.acquire(KEY, CONFIG).cached


def test_logs_never_contain_config_values(
    make: Callable[..., Pool], caplog: pytest.LogCaptureFixture
) -> None:
    pool = make(capacity=1)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        held = pool.acquire(KEY, CONFIG)
        pool.acquire(KEY2, CONFIG)  # overflow warning
        pool.release(pool.acquire(KEY, CONFIG, reattempt=True))
        pool.release(held, failed=True)
        pool.log_stats()
    assert "orders-0" in caplog.text and "over capacity" in caplog.text
    assert SECRET not in caplog.text and "bootstrap" not in caplog.text


# --- the reaper ---------------------------------------------------------------------------------


def test_regression_an_idle_worker_kept_its_clients_the_reaper_closes_them(
    policy: Policy, factory: Factory
) -> None:
    """Expiry checked only when a holder came kept an idle worker's clients (and their
    reconnects to a cluster that may be gone) until its next task: for ever in a worker that
    gets none."""
    pool: Pool = LeasePool(factory, policy, idle_timeout_s=0.2)
    held = pool.acquire(KEY2, CONFIG)
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    assert _wait(lambda: lease.client.close_count == 1)
    assert pool.stats().size == 1 and pool.stats().evictions == 1
    assert held.client.close_count == 0  # in use: never reaped
    assert _wait(lambda: not pool._reaper.running)  # it stops once nothing is idle
    pool.release(held)
    assert _wait(lambda: held.client.close_count == 1)
    assert pool.stats().size == 0


def test_a_shortened_timeout_reaps_without_waiting_for_the_old_one(
    policy: Policy, factory: Factory
) -> None:
    pool: Pool = LeasePool(factory, policy, idle_timeout_s=300.0)
    lease = pool.acquire(KEY, CONFIG)
    pool.release(lease)
    assert pool._reaper.running and lease.client.close_count == 0
    time.sleep(0.3)
    pool.configure(idle_timeout_s=0.2)  # what the next query's cache timeout option does
    assert _wait(lambda: lease.client.close_count == 1, timeout_s=3.0)


def test_a_pool_without_a_reaper_starts_no_thread(policy: Policy, factory: Factory) -> None:
    pool: Pool = LeasePool(factory, policy, idle_timeout_s=0.1, reaper=False)
    pool.release(pool.acquire(KEY, CONFIG))
    time.sleep(0.3)
    assert not pool._reaper.running and pool.stats().size == 1


# --- one pool per process ------------------------------------------------------------------------


@pytest.fixture
def worker_pool(policy: Policy) -> Generator[WorkerPool[str], None, None]:
    worker: WorkerPool[str] = WorkerPool(policy)
    yield worker
    worker.local.reset()


def test_the_worker_pool_is_a_process_singleton(
    worker_pool: WorkerPool[str], factory: Factory
) -> None:
    pool = worker_pool.get(factory)
    assert worker_pool.get(Factory()) is pool
    lease = pool.acquire(KEY, CONFIG)
    assert lease.client in factory.created  # the first caller's factory is kept
    pool.release(lease)
    assert worker_pool.get(factory, capacity=7, idle_timeout_s=5.0) is pool
    assert (pool._capacity, pool._idle_timeout_s) == (7, 5.0)


def test_the_worker_pool_is_fork_safe(
    worker_pool: WorkerPool[str], factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = worker_pool.get(factory)
    parent_lease = parent.acquire(KEY, CONFIG)
    parent.release(parent_lease)
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
    child = worker_pool.get(factory)
    assert child is not parent and worker_pool.get(factory) is child
    assert child.acquire(KEY, CONFIG).client is not parent_lease.client
    worker_pool.local.close_at_exit()  # the child's exit touches only the child's pool
    assert parent_lease.client.close_count == 0  # the parent's clients are not its to close
    parent.close_all()


# --- threads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chaos", [False, True], ids=["plain", "reattempts-and-failures"])
def test_concurrent_holders_never_share_a_client(
    policy: Policy, factory: Factory, chaos: bool
) -> None:
    pool: Pool = LeasePool(factory, policy, capacity=4, reaper=False)
    threads_n, iterations = 12, 200
    errors: list[str] = []
    barrier = threading.Barrier(threads_n)

    def worker(index: int) -> None:
        barrier.wait()
        for i in range(iterations):
            lease = pool.acquire(KEY, CONFIG, reattempt=chaos and (i + index) % 7 == 0)
            client = lease.client
            with client.guard:
                client.holders += 1
                if client.holders != 1:
                    errors.append(f"{client!r} held by {client.holders} threads")
                if client.close_count:
                    errors.append(f"{client!r} handed out after close")
            time.sleep(0)  # widen the window in which a second holder would be noticed
            with client.guard:
                client.holders -= 1
            pool.release(lease, failed=chaos and (i * index) % 11 == 3)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # frequent thread switches shake out races
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
    assert stats.in_use == 0 and stats.size <= 4
    assert stats.creations == len(factory.created)
    pooled = [e.client for e in pool._entries]
    for client in factory.created:
        expected = 0 if client in pooled else 1
        assert client.close_count == expected, f"{client!r}: leaked or closed twice"
    assert stats.closes == len(factory.created) - len(pooled)
    if not chaos:
        assert stats.hits > 0
