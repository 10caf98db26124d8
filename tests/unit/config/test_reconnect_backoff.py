"""Every client kafka_direct makes connects without librdkafka's 50 ms pause after bootstrap
(kafka_direct.config.clients.RECONNECT_BACKOFF_MS), unless the user chose a backoff."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from kafka_direct.config.clients import (
    admin_config,
    connection_config,
    executor_consumer_config,
    marker_consumer_config,
    producer_config,
    receiver_consumer_config,
)

USER = {"bootstrap.servers": "b:9092"}

BUILDERS: dict[str, Callable[[Mapping[str, str]], dict[str, str]]] = {
    "driver's admin client": admin_config,
    "sink's admin client": connection_config,
    "sink's marker reader": lambda u: marker_consumer_config(connection_config(u), "txn"),
    "executors' consumers": lambda u: executor_consumer_config(
        u, group_id="g", isolation_level="read_committed"
    ),
    "receivers' consumers": lambda u: receiver_consumer_config(
        u, group="g", auto_offset_reset="earliest", receiver_id=0
    ),
    "sink's producers": producer_config,
    "exactly-once producers": lambda u: producer_config(u, exactly_once=True),
}


@pytest.mark.parametrize("client", sorted(BUILDERS))
def test_a_client_connects_to_the_brokers_without_a_50_ms_pause(client: str) -> None:
    # librdkafka spaces a client's connections by half this backoff: 50 ms at its default 100.
    assert BUILDERS[client](USER)["reconnect.backoff.ms"] == "20"


@pytest.mark.parametrize("client", sorted(BUILDERS))
def test_the_users_backoff_wins(client: str) -> None:
    config = BUILDERS[client]({**USER, "reconnect.backoff.ms": "250"})
    assert config["reconnect.backoff.ms"] == "250"
