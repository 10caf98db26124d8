"""A Spark job's Java Kafka client settings that librdkafka names or counts differently,
translated. Pure: plain library, used wherever ``kafka.*`` options are judged
(:func:`kafka_direct.config.reader.kafka_params`), in the driver and in executors.

Why: most Java client settings have the same name in librdkafka, but a few of those that Spark
jobs tune every day do not (``fetch.max.wait.ms`` is librdkafka's ``fetch.wait.max.ms``,
``max.request.size`` its ``message.max.bytes``), and librdkafka refuses a name it does not know.
So that a job moves by changing the format name, each of these becomes its librdkafka
equivalent, with the value converted where the unit differs. A setting that only bounds how
long the Java client's own calls block, or feeds its JMX metrics, has nothing to do in
librdkafka and changes nothing that is read or written: it is dropped with a warning. A setting
whose meaning librdkafka cannot give is refused, naming what to set instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kafka_direct.config.clients import int_setting, kbytes
from kafka_direct.errors import ConfigurationError

__all__ = ["DROPPED", "PRODUCER_ONLY", "RENAMED", "translate_java_names"]

log = logging.getLogger(__name__)


def _same(value: str) -> str:
    return value


def _socket_buffer(value: str) -> str:
    # Java's -1 is "the operating system's default", which librdkafka spells 0.
    return "0" if value.strip() == "-1" else value


def _bytes_to_kbytes(value: str) -> str:
    count = int_setting(value, None)
    return value if count is None else str(max(1, kbytes(count)))


#: Java name → (librdkafka name, value conversion).
RENAMED: dict[str, tuple[str, Callable[[str], str]]] = {
    "fetch.max.wait.ms": ("fetch.wait.max.ms", _same),
    "max.request.size": ("message.max.bytes", _same),
    "receive.buffer.bytes": ("socket.receive.buffer.bytes", _socket_buffer),
    "send.buffer.bytes": ("socket.send.buffer.bytes", _socket_buffer),
    "buffer.memory": ("queue.buffering.max.kbytes", _bytes_to_kbytes),
}

_TOKEN_REFRESH = (
    "it schedules the Java login's token refresh; librdkafka refreshes a token at 80% of its "
    "lifetime"
)
_TICKET_RENEWAL = (
    "it schedules the JVM's Kerberos ticket renewal; librdkafka runs its kinit command again "
    "every kafka.sasl.kerberos.min.time.before.relogin"
)
_TOKEN_REQUESTS = (
    "it tunes the Java OIDC login's requests to the token endpoint; librdkafka's have their own "
    "timeouts and retries"
)
_TOKEN_CHECK = "it tunes how a token is validated, which is the broker's work"
_JVM_TLS = "it chooses the JVM's TLS implementation; librdkafka's TLS is OpenSSL's"

#: Java-only settings that change nothing kafka_direct reads or writes, and why.
DROPPED: dict[str, str] = {
    "max.block.ms": "it bounds how long the Java producer's send() blocks; a task's wait for "
    "room in the queue is bounded by kafka.delivery.timeout.ms",
    "default.api.timeout.ms": "it bounds the Java consumer's blocking calls; kafka_direct's "
    "offset requests are bounded by fetchOffset.numRetries and fetchOffset.retryIntervalMs",
    "metadata.max.idle.ms": "the Java producer's metadata expiry for idle topics",
    "exclude.internal.topics": "kafka_direct reads only the topics a query names",
    "metric.reporters": "Java metrics reporters",
    "metrics.num.samples": "Java client metrics",
    "metrics.sample.window.ms": "Java client metrics",
    "metrics.recording.level": "Java client metrics",
    "auto.include.jmx.reporter": "Java client metrics",
    "partitioner.adaptive.partitioning.enable": "it only moves records without a key, which "
    "librdkafka spreads with its sticky partitioner (sticky.partitioning.linger.ms)",
    "partitioner.availability.timeout.ms": "it only moves records without a key",
    # Sign-in tuning of the Java client's own login code; librdkafka schedules its own.
    "sasl.login.refresh.window.factor": _TOKEN_REFRESH,
    "sasl.login.refresh.window.jitter": _TOKEN_REFRESH,
    "sasl.login.refresh.min.period.seconds": _TOKEN_REFRESH,
    "sasl.login.refresh.buffer.seconds": _TOKEN_REFRESH,
    "sasl.kerberos.ticket.renew.window.factor": _TICKET_RENEWAL,
    "sasl.kerberos.ticket.renew.jitter": _TICKET_RENEWAL,
    "sasl.login.connect.timeout.ms": _TOKEN_REQUESTS,
    "sasl.login.read.timeout.ms": _TOKEN_REQUESTS,
    "sasl.login.retry.backoff.ms": _TOKEN_REQUESTS,
    "sasl.login.retry.backoff.max.ms": _TOKEN_REQUESTS,
    # How a broker validates tokens: the Java client's own check of its token reads a few.
    "sasl.oauthbearer.scope.claim.name": _TOKEN_CHECK,
    "sasl.oauthbearer.clock.skew.seconds": _TOKEN_CHECK,
    "sasl.oauthbearer.expected.audience": _TOKEN_CHECK,
    "sasl.oauthbearer.expected.issuer": _TOKEN_CHECK,
    "sasl.oauthbearer.jwks.endpoint.url": _TOKEN_CHECK,
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": _TOKEN_CHECK,
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": _TOKEN_CHECK,
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": _TOKEN_CHECK,
    # The JVM's TLS machinery; librdkafka's TLS is OpenSSL's, which verifies as PKIX does.
    "ssl.keymanager.algorithm": _JVM_TLS,
    "ssl.trustmanager.algorithm": _JVM_TLS,
    "ssl.secure.random.implementation": _JVM_TLS,
    "ssl.provider": _JVM_TLS,
}

#: Kafka's default partitioner: what the sink does already (murmur2 of the key).
_DEFAULT_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
    "org.apache.kafka.clients.producer.internals.BuiltInPartitioner",
}


#: Producer settings: where no producer is made (a source, a DStream), the Java consumer
#: ignores them, and librdkafka's equivalents would constrain the consumer
#: (message.max.bytes must not exceed fetch.max.bytes): dropped there, with a warning.
PRODUCER_ONLY = {"max.request.size", "buffer.memory", "max.block.ms", "partitioner.class"}


def translate_java_names(
    params: Mapping[str, str], *, prefix: str = "kafka.", producer: bool = True
) -> dict[str, str]:
    """``params`` (names without ``prefix``) with Java-only names translated or dropped;
    ``producer``: the settings are a producer's (else producer-only ones are dropped).

    Refuses a Java name set together with its librdkafka twin (which one would the user
    mean?) and a ``partitioner.class`` other than Kafka's default."""
    out = dict(params)
    if not producer:
        for java in sorted(PRODUCER_ONLY & set(out)):
            del out[java]
            log.warning(
                "%s%s is a Java producer setting, and a read makes no producer: ignored, as "
                "the Java consumer ignores it.",
                prefix,
                java,
            )
    for java, (native, convert) in RENAMED.items():
        if java not in out:
            continue
        if native in out:
            raise ConfigurationError(
                f"{prefix}{java}",
                out[java],
                f"either {prefix}{java} (the Java client's name) or {prefix}{native} "
                "(librdkafka's), not both",
                f"They are one setting: remove one of them (now {prefix}{native}={out[native]!r}).",
            )
        out[native] = convert(out.pop(java))
    for java, why in DROPPED.items():
        if java in out:
            del out[java]
            log.warning(
                "%s%s is a Java client setting that librdkafka has no use for: %s. Ignored.",
                prefix,
                java,
                why,
            )
    partitioner = out.get("partitioner.class")
    if partitioner is not None:
        if partitioner.strip() not in _DEFAULT_PARTITIONERS:
            raise ConfigurationError(
                f"{prefix}partitioner.class",
                partitioner,
                "Kafka's default partitioner, or none: librdkafka runs no Java partitioner",
                f"Leave it out: the sink puts a keyed record where Kafka's default partitioner "
                f"does (murmur2 of the key). Choose one of librdkafka's with {prefix}partitioner "
                "(e.g. 'random', 'consistent_random'), or set each row's partition in a "
                "'partition' column.",
            )
        del out["partitioner.class"]
    return out
