"""What a wing of the keyed client pool (:mod:`kafka_direct.executor.lease_pool`) decides for
itself (:class:`Policy`), what a pool reports (:class:`PoolStats`), and all it needs from what
it keeps (:class:`Closeable`). Runs in Spark executors (Python workers); pure: no Kafka client
is imported here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Closeable", "Policy", "PoolStats"]


class Closeable(Protocol):
    """All the pool needs from what it keeps."""

    def close(self) -> None: ...


def _always_usable(client: Any) -> bool:
    return True


def _holds_nothing(client: Any) -> int:
    return 0


@dataclass(frozen=True)
class Policy:
    """What one wing's pool does differently (see the module docstring)."""

    #: What the pool keeps, for log lines and the reaper's thread name ("consumer").
    noun: str
    #: The wing's logger: users find the pool's lines under the wing's module name.
    log: logging.Logger
    capacity: int
    idle_timeout_s: float
    #: At most one pooled client per key (Spark's ``KafkaDataConsumer``). While it is lent, a
    #: second holder gets an *uncached* client, closed at its release; a task reattempt does
    #: too; and a failed release invalidates the key. Otherwise a key pools many clients, a
    #: holder gets the most recently released one or a new pooled one, and a reattempt gets a
    #: new pooled one.
    one_per_key: bool = False
    #: Whether a client may still be handed out or kept (a producer after a fatal error may not).
    usable: Callable[[Any], bool] = _always_usable
    #: About how many bytes a client holds while it idles in the pool (a consumer's prefetched
    #: records), asked at its release; the pool's ``idle_bytes`` bounds their sum.
    idle_bytes_of: Callable[[Any], int] = _holds_nothing
    #: ``adopt(have, want)``: whether an idle client pooled under key ``have`` can serve key
    #: ``want`` once its holder re-positions it, as a score (what the two have in common;
    #: higher is better), or None when it cannot. None: no key adopts another's client. On a
    #: miss, the idle client of the best positive score is re-keyed and lent (ties: the most
    #: recently used); one of score 0 only when :attr:`adopt_unrelated_from` or more idle
    #: clients could serve the key (then the least recently used of them).
    adopt: Callable[[Any, Any], int | None] | None = None
    #: See :attr:`adopt`: below this many candidates, a key with nothing in common with any
    #: idle client gets a new one (those idle clients likely serve keys that recur).
    adopt_unrelated_from: int = 1


@dataclass(frozen=True)
class PoolStats:
    """Counters since the pool was created; ``size`` (pooled clients) and ``in_use`` (pooled
    clients lent now) are current."""

    hits: int
    misses: int
    creations: int
    evictions: int
    closes: int
    size: int
    in_use: int
    #: Misses served by another key's idle client (:attr:`Policy.adopt`), not by a new one.
    adoptions: int = 0

    @property
    def idle(self) -> int:
        return self.size - self.in_use
