"""Ports for the servers the test helpers start: Kafka nodes, Tansu and its S3 store, the schema
registry, Spark's standalone master and Spark Connect.

Plain library: runs in the process that starts such a server (a pytest worker, a benchmark).

Why not ``bind(0)``: that hands out ports from the kernel's ephemeral range, where Spark's own
servers get theirs too (a ``collect()``'s result socket accepts one connection), and where every
outgoing connection takes its local port. A port picked there may be taken by such a socket
before the server binds it, and a stopped server's port stays in the retries of any client left
over; either may then connect to Spark's socket first, and the query fails
(``CANNOT_OPEN_SOCKET``). So the ports come from just below that range.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

__all__ = ["broker_ports", "free_port"]

#: Where the kernel reads its ephemeral port range (Linux).
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: How many ports below that range the test servers choose from.
_SPAN = 12000
#: After this many busy ports in a row, any free port the kernel gives is better than none.
_TRIES = 1000

#: Every port this process has handed out: two servers started here never get the same one,
#: even when the first has not bound it yet.
_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


def broker_ports(ephemeral_low: int | None) -> range | None:
    """The ports a test server takes: just below the kernel's ephemeral range, or None (then
    any free port) when that range is unknown or starts too low to leave a span below it."""
    if ephemeral_low is None or ephemeral_low - _SPAN < 1024:
        return None
    return range(ephemeral_low - _SPAN, ephemeral_low)


def _ephemeral_low() -> int | None:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(host: str, port: int) -> int | None:
    """``port`` (0: one the kernel picks) if it can be bound on ``host`` now, else None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return None
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1", taken: set[int] | None = None) -> int:
    """A port free on ``host`` now, handed out by this process for the first time, not in
    ``taken`` (which it joins), and below the kernel's ephemeral range where it can
    (:func:`broker_ports`). Another process may still bind it first: a caller retries its
    server's start on a new port when the bind fails."""
    ports = broker_ports(_ephemeral_low())
    tries = 0
    while True:
        tries += 1
        wanted = random.choice(ports) if ports is not None and tries <= _TRIES else 0
        port = _bindable(host, wanted)
        if port is None:
            if wanted == 0:
                raise OSError(f"No port can be bound on {host!r}: is it an address of this host?")
            continue
        with _LOCK:
            if port in _HANDED_OUT or (taken is not None and port in taken):
                continue
            _HANDED_OUT.add(port)
        if taken is not None:
            taken.add(port)
        return port
