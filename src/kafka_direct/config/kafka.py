"""``KafkaConfig``, redaction, and ``Subscription``. Pure: plain library, used by every process.

A librdkafka config travels from the driver to executors and into error messages, so it is an
immutable mapping whose ``repr``/``str`` never show secret values; :func:`redact` does the same
for any dict that might be logged (the rule is :mod:`kafka_direct.redaction`'s).
:class:`Subscription` says which partitions a read names (Spark's ``subscribe`` /
``subscribePattern`` / ``assign``); both APIs use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from kafka_direct.config.jaas import java_code
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import TopicPartition
from kafka_direct.redaction import REDACTED, is_secret, redact

__all__ = [
    "REDACTED",
    "KafkaConfig",
    "Subscription",
    "is_secret",
    "redact",
    "refuse_jvm_settings",
]


#: Java client settings librdkafka does not have, and what to set instead. A job's JAAS line,
#: stores, TLS versions and callback handlers are translated or judged before this is asked
#: (:mod:`~kafka_direct.config.security`): what is left here has no translation.
JVM_ONLY_KAFKA_KEYS = {
    "sasl.login.callback.handler.class": java_code("", "It", "{p}"),
    "sasl.client.callback.handler.class": java_code("", "It", "{p}"),
    "ssl.engine.factory.class": (
        "It names Java code (an SSLEngine factory) librdkafka cannot run: remove it; "
        "librdkafka's TLS is OpenSSL's, set with the {p}ssl.* settings."
    ),
}


def refuse_jvm_settings(params: Iterable[str], *, prefix: str = "kafka.") -> None:
    """Refuse a Java client setting that librdkafka does not have (``sasl.jaas.config`` above
    all), naming its librdkafka equivalents. ``params`` are librdkafka names without ``prefix``;
    ``prefix`` is how the user wrote them (``kafka.`` in options, nothing in ``kafkaParams``)."""
    for name in params:
        instead = JVM_ONLY_KAFKA_KEYS.get(name.strip().lower())
        if instead is not None:
            raise ConfigurationError(
                prefix + name,
                REDACTED,
                "a librdkafka setting: this is a JVM (Java Kafka client) setting",
                instead.format(p=prefix),
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
