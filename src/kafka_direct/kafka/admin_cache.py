"""Admin clients kept for the next query of the same process. Runs in the Spark driver's Python
planner processes, which Spark reuses from query to query (its Python workers on the driver).

Every batch query asks Kafka for offsets twice before a task runs: ``load()`` checks that the
cluster answers, and planning lists the offsets. Each asked through a new admin client, and so
paid for a new connection (TCP, then TLS and SASL where the cluster has them) every time. A
client kept here, keyed by the exact connection settings, answers the next query on a connection
that is already open. A client idle for :data:`IDLE_S` is dropped (an ``AdminClient`` has no
``close``: dropping the last reference frees it), and so is one whose first contact failed, so
that a query after an outage or a settings fix starts afresh.

Settings that are not plain values (a callback) are never shared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka_direct.kafka.events import ClientEvents

__all__ = ["IDLE_S", "MAX_CLIENTS", "drop_shared", "shared_admin"]

#: How long an unused client is kept.
IDLE_S = 60.0
#: At most this many clients (distinct settings) are kept; the least recently used goes first.
MAX_CLIENTS = 8

Key = tuple[tuple[str, str], ...]


@dataclass
class _Entry:
    admin: Any
    events: ClientEvents
    used: float


_lock = threading.Lock()
_clients: dict[Key, _Entry] = {}


def cache_key(kafka: Mapping[str, Any]) -> Key | None:
    """The settings as a key, or None when one is not a plain value (never shared)."""
    if not all(isinstance(v, (str, int, float, bool)) for v in kafka.values()):
        return None
    return tuple(sorted((str(k), str(v)) for k, v in kafka.items()))


def shared_admin(
    kafka: Mapping[str, Any],
    make: Callable[[Mapping[str, Any], ClientEvents], Any],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Any, ClientEvents]:
    """The kept client for ``kafka`` (made with ``make`` when there is none), and its events."""
    key = cache_key(kafka)
    now = clock()
    with _lock:
        for stale in [k for k, e in _clients.items() if now - e.used > IDLE_S]:
            del _clients[stale]
        entry = _clients.get(key) if key is not None else None
        if entry is not None:
            entry.used = now
            return entry.admin, entry.events
    events = ClientEvents("The Kafka admin client")
    admin = make(kafka, events)  # outside the lock: creating a client may take a while
    if key is None:
        return admin, events
    with _lock:
        _clients[key] = _Entry(admin, events, now)
        while len(_clients) > MAX_CLIENTS:
            del _clients[min(_clients, key=lambda k: _clients[k].used)]
    return admin, events


def drop_shared(kafka: Mapping[str, Any], admin: Any) -> None:
    """Forget ``admin`` if it is the kept client for ``kafka`` (its first contact failed)."""
    key = cache_key(kafka)
    with _lock:
        entry = _clients.get(key) if key is not None else None
        if entry is not None and entry.admin is admin:
            del _clients[key]  # type: ignore[arg-type]
