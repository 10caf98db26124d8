"""The test servers (Kafka nodes, Tansu, the schema registry, Spark's standalone master) take
ports below the kernel's ephemeral range, where no server Spark starts (a collect()'s result
socket) can be handed the same port (kafka_direct.testing.ports)."""

from __future__ import annotations

import socket

import pytest

from kafka_direct.testing import ports
from kafka_direct.testing.ports import broker_ports, free_port


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
    low = ports._ephemeral_low()
    taken: set[int] = set()
    handed = [free_port(taken=taken) for _ in range(20)]
    assert len(set(handed)) == 20 and taken == set(handed)
    if low is not None and broker_ports(low) is not None:
        assert all(port < low for port in handed), (low, handed)


def test_a_process_never_hands_out_a_port_twice_even_without_a_taken_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two helpers starting side by side (Tansu and its S3 store, a master and its web UI) pick
    # before either binds; a one-port range makes a repeat certain if the process forgot.
    low = ports._bindable("127.0.0.1", 0) + 1  # type: ignore[operator]  # a free port's next
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: low)
    monkeypatch.setattr(ports, "_SPAN", 1)
    monkeypatch.setattr(ports, "_HANDED_OUT", set())
    first = free_port()
    assert first == low - 1
    # The range's one port is handed out already: the second comes from the kernel.
    assert free_port() != first


def test_an_ipv6_host_gets_a_port_bindable_on_it() -> None:
    if not socket.has_ipv6:
        pytest.fail("this machine's Python has no IPv6 support")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        pytest.fail(f"::1 cannot be bound here ({error}); the test needs a loopback IPv6")
    port = free_port("::1")
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", port))


def test_without_a_known_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: None)
    port = free_port()
    assert 0 < port < 65536


def test_an_address_of_no_interface_here_is_refused_not_retried_forever() -> None:
    with pytest.raises(OSError, match=r"192\.0\.2\.1"):
        free_port("192.0.2.1")  # TEST-NET-1: never an address of this host
