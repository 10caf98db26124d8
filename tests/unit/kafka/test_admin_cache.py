"""The process's kept admin clients (kafka_direct.kafka.admin_cache): one per exact settings,
dropped when idle, least recently used first past the cap, and on a failed first contact."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kafka_direct.kafka import admin_cache
from kafka_direct.kafka.admin_cache import IDLE_S, MAX_CLIENTS, cache_key, drop_shared, shared_admin
from kafka_direct.kafka.events import ClientEvents

A = {"bootstrap.servers": "a:9092"}
B = {"bootstrap.servers": "b:9092"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    admin_cache._clients.clear()
    yield
    admin_cache._clients.clear()


def factory() -> tuple[list[Mapping[str, Any]], Any]:
    made: list[Mapping[str, Any]] = []

    def make(kafka: Mapping[str, Any], events: ClientEvents) -> object:
        made.append(dict(kafka))
        return object()

    return made, make


@pytest.mark.parametrize(
    ("kafka", "shared"),
    [
        ({"bootstrap.servers": "a:9092", "sasl.password": "x"}, True),
        ({"bootstrap.servers": "a:9092", "retries": 3, "enable.idempotence": True}, True),
        ({"bootstrap.servers": "a:9092", "oauth_cb": lambda _config: ("t", 0.0)}, False),
    ],
)
def test_only_plain_settings_are_shared(kafka: dict[str, Any], shared: bool) -> None:
    assert (cache_key(kafka) is not None) is shared


def test_the_same_settings_get_the_same_client_and_its_events() -> None:
    made, make = factory()
    first = shared_admin(A, make)
    assert shared_admin(dict(A), make) == first  # equal settings, another dict
    other = shared_admin(B, make)
    assert other[0] is not first[0]
    assert len(made) == 2


def test_a_client_idle_too_long_is_replaced() -> None:
    made, make = factory()
    clock = Clock()
    first, _ = shared_admin(A, make, clock=clock)
    clock.now += IDLE_S - 1
    assert shared_admin(A, make, clock=clock)[0] is first  # used: its idle time starts again
    clock.now += IDLE_S + 1
    assert shared_admin(A, make, clock=clock)[0] is not first
    assert len(made) == 2


def test_past_the_cap_the_least_recently_used_goes() -> None:
    _made, make = factory()
    clock = Clock()
    clients = []
    for i in range(MAX_CLIENTS):
        clock.now += 1
        clients.append(shared_admin({"bootstrap.servers": f"h{i}:9092"}, make, clock=clock)[0])
    clock.now += 1
    shared_admin({"bootstrap.servers": "h0:9092"}, make, clock=clock)  # h0 used again: h1 oldest
    clock.now += 1
    shared_admin({"bootstrap.servers": "new:9092"}, make, clock=clock)
    assert shared_admin({"bootstrap.servers": "h0:9092"}, make, clock=clock)[0] is clients[0]
    assert shared_admin({"bootstrap.servers": "h1:9092"}, make, clock=clock)[0] is not clients[1]


def test_a_client_whose_first_contact_failed_is_dropped() -> None:
    made, make = factory()
    first, _ = shared_admin(A, make)
    drop_shared(A, object())  # another client: the kept one stays
    assert shared_admin(A, make)[0] is first
    drop_shared(A, first)
    assert shared_admin(A, make)[0] is not first
    assert len(made) == 2


def test_unshareable_settings_get_a_new_client_every_time() -> None:
    made, make = factory()
    kafka = {"bootstrap.servers": "a:9092", "oauth_cb": print}
    assert shared_admin(kafka, make)[0] is not shared_admin(kafka, make)[0]
    assert len(made) == 2
