"""``KafkaConfig``, redaction, and ``Subscription``. Pure: plain library, used by every process.

A librdkafka config travels from the driver to executors and into error messages, so it is an
immutable mapping whose ``repr``/``str`` never show secret values; :func:`redact` does the same
for any dict that might be logged. :class:`Subscription` says which partitions a read names
(Spark's ``subscribe`` / ``subscribePattern`` / ``assign``); both APIs use it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import TopicPartition

__all__ = ["REDACTED", "KafkaConfig", "Subscription", "is_secret", "redact", "refuse_near_misses"]

_SECRET_KEY = re.compile(
    r"password|secret|token|jaas|credential|ssl\.key\.pem|private|oauthbearer\.config", re.I
)

REDACTED = "*********(redacted)"


def is_secret(key: str) -> bool:
    """Whether an option's value must never be shown (passwords, tokens, keys)."""
    return _SECRET_KEY.search(key) is not None


def redact(config: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``config`` whose secret-looking values are replaced, safe to log or show."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in config.items()}


def refuse_near_misses(options: Mapping[str, str], known_names: Iterable[str], what: str) -> None:
    """Refuse an option whose name is a near-miss of a known one (``what``: "source", "sink").

    Spark ignores unknown options, and passes its own (``path``, ``checkpointLocation``...), so
    only near-misses are refused: a typo such as ``startingOffset`` or ``topics`` would otherwise
    fall back to a default without a word. ``kafka.`` options are librdkafka's to judge.
    """
    known = {name.lower(): name for name in known_names}
    for key, value in options.items():
        if key.startswith("kafka.") or key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if close:
            raise ConfigurationError(
                key,
                REDACTED if is_secret(key) else value,
                f"a known {what} option",
                f"Did you mean '{known[close[0]]}'?",
            )


class KafkaConfig(Mapping[str, str]):
    """An immutable librdkafka config whose ``repr``/``str`` never show secret values."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._data.items())))

    def __repr__(self) -> str:
        return f"KafkaConfig({redact(self._data)!r})"

    __str__ = __repr__

    def merged(self, overrides: Mapping[str, str]) -> KafkaConfig:
        return KafkaConfig({**self._data, **overrides})

    def to_dict(self) -> dict[str, str]:
        """The raw config, for handing to librdkafka only. Never log the result."""
        return dict(self._data)


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: Spark's ``ConsumerStrategies``."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(str(tp) for tp in self.partitions)
