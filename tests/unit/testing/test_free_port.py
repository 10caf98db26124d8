"""Test brokers take ports below the kernel's ephemeral range, where no server Spark starts
(a collect()'s result socket) can be handed the same port (cluster_probe.broker_ports)."""

from __future__ import annotations

import pytest

from kafka_direct.testing import cluster_probe
from kafka_direct.testing.cluster_probe import broker_ports, free_port


@pytest.mark.parametrize(
    ("ephemeral_low", "expected"),
    [
        (32768, range(20768, 32768)),  # Linux's default range starts at 32768
        (49152, range(37152, 49152)),  # IANA's
        (10000, None),  # too low to leave a span above the privileged ports: any free port
        (None, None),  # not Linux, or unreadable
    ],
)
def test_broker_ports_lie_just_below_the_ephemeral_range(
    ephemeral_low: int | None, expected: range | None
) -> None:
    assert broker_ports(ephemeral_low) == expected


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low = cluster_probe._ephemeral_low()
    taken: set[int] = set()
    ports = [free_port(taken) for _ in range(20)]
    assert len(set(ports)) == 20 and taken == set(ports)
    if low is not None and broker_ports(low) is not None:
        assert all(port < low for port in ports), (low, ports)


def test_without_a_known_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_probe, "_ephemeral_low", lambda: None)
    port = free_port(set())
    assert 0 < port < 65536
