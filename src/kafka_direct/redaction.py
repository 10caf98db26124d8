"""Which option values may be shown to a user. Pure: plain library, used by every process.

An option's value reaches a person through an error message, a log line or a ``repr``. The
rule, decided here only:

- the value of a secret key (a password, a token, key material, a JAAS line, any
  ``sasl.oauthbearer.*`` setting) is never shown;
- nor is the value of a key one or two edits away from a secret one: ``sasl.pasword`` is a
  typo of ``sasl.password`` and holds a password all the same;
- nor the value of any Kafka client key (a ``kafka.``-prefixed option, or a lowercase dotted
  ``kafkaParams`` key) that is not on the list of known, harmless librdkafka settings below.
  A key we do not know may be a secret we did not think of.

A key is judged whatever its spelling: ``confluent.schema.registry.basic.auth.user_info``,
``...userInfo`` and ``...user-info`` are ``basic.auth.user.info`` (:func:`is_secret`).
Text that is not ours (librdkafka's log lines and error events) cannot be judged by key: a
:class:`Scrubber` replaces the secret values of a client's config wherever they appear in it.

:class:`kafka_direct.errors.ConfigurationError` applies :func:`shown` to every value it is
given, so no caller can forget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache

__all__ = [
    "HIDDEN",
    "REDACTED",
    "SAFE_KAFKA_KEYS",
    "SECRET_KEYS",
    "Scrubber",
    "config_scrubber",
    "is_secret",
    "kafka_key",
    "may_show",
    "redact",
    "shown",
]

REDACTED = "*********(redacted)"
#: Shown instead of the value of a Kafka key that is not known to be harmless.
HIDDEN = "<value hidden: not a known librdkafka setting>"

#: Secret keys librdkafka, the Java client, Spark and Schema Registry clients know.
SECRET_KEYS = frozenset(
    {
        "sasl.password",
        "sasl.jaas.config",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.assertion.private.key.file",
        "sasl.oauthbearer.assertion.jwt.template.file",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.extensions",
        "sasl.oauthbearer.scope",
        "sasl.kerberos.keytab",
        "ssl.key.password",
        "ssl.key.pem",
        "ssl_key",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.certificate.pem",
        "ssl.ca.pem",
        "ssl_certificate",
        "basic.auth.user.info",
        "bearer.auth.token",
        "bearer.auth.client.secret",
        "client.secret",
        "delegation.token",
        "access.token",
        "refresh.token",
        "aws.secret.access.key",
        "aws.session.token",
    }
)

# Words that make any key secret wherever they appear; a segment of a key within two edits of
# a long one, or one edit of a short one (two edits turn "secret" into "socket"), is secret too.
_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "credential", "jaas")
_SECRET_PATTERN = re.compile(
    r"passw|passphrase|secret|token|jaas|credential|private|oauthbearer|\.pem$|_key$|"
    r"keystore\.key|user\.?info|keytab",
    re.I,
)

#: librdkafka (and common Java-name) settings whose values are harmless to show. Values of any
#: other Kafka key are hidden. None is within two edits of a secret key (a unit test checks).
SAFE_KAFKA_KEYS = frozenset(
    {
        # connection and client identity
        "bootstrap.servers", "metadata.broker.list", "client.id", "client.rack",
        "client.dns.lookup", "broker.address.family", "security.protocol", "sasl.mechanism",
        "sasl.mechanisms", "sasl.username", "sasl.kerberos.service.name",
        "sasl.kerberos.principal", "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin", "ssl.ca.location", "ssl.certificate.location",
        "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.type",
        "ssl.key.location", "ssl.keystore.location", "ssl.crl.location",
        "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
        "ssl.cipher.suites", "ssl.curves.list", "ssl.sigalgs.list", "ssl.providers",
        "ssl.ca.certificate.stores", "ssl.protocol", "ssl.enabled.protocols",
        "https.ca.location", "sasl.login.class", "socket.timeout.ms", "socket.keepalive.enable",
        "socket.connection.setup.timeout.ms", "connections.max.idle.ms", "reconnect.backoff.ms",
        "reconnect.backoff.max.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms",
        "topic.metadata.refresh.sparse", "topic.metadata.propagation.max.ms",
        "allow.auto.create.topics", "api.version.request", "broker.version.fallback",
        "statistics.interval.ms", "log_level", "debug", "log.connection.close",
        "enable.metrics.push", "request.timeout.ms", "retry.backoff.ms", "retry.backoff.max.ms",
        "message.max.bytes", "receive.message.max.bytes",
        # consumer
        "group.id", "group.instance.id", "group.protocol", "group.remote.assignor",
        "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
        "max.poll.interval.ms", "auto.offset.reset", "enable.auto.commit",
        "auto.commit.interval.ms", "enable.auto.offset.store", "isolation.level",
        "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms", "fetch.message.max.bytes",
        "max.partition.fetch.bytes", "fetch.queue.backoff.ms", "fetch.error.backoff.ms",
        "queued.min.messages", "queued.max.messages.kbytes", "enable.partition.eof",
        "check.crcs", "max.poll.records",
        # producer
        "acks", "request.required.acks", "enable.idempotence", "delivery.timeout.ms",
        "message.timeout.ms", "linger.ms", "queue.buffering.max.ms",
        "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
        "batch.num.messages", "compression.type", "compression.codec", "compression.level",
        "retries", "message.send.max.retries", "max.in.flight",
        "max.in.flight.requests.per.connection", "partitioner", "transactional.id",
        "transaction.timeout.ms", "sticky.partitioning.linger.ms",
        # Java client names the library refuses or maps, by name
        "key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
        "interceptor.classes",
        # Java client names translated or dropped (kafka_direct.config.java_client)
        "fetch.max.wait.ms", "max.request.size", "buffer.memory", "receive.buffer.bytes",
        "send.buffer.bytes", "max.block.ms", "default.api.timeout.ms", "metadata.max.idle.ms",
        "exclude.internal.topics", "partitioner.class", "socket.receive.buffer.bytes",
        "socket.send.buffer.bytes",
    }
)  # fmt: skip

_KAFKA_LIKE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")


def _distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein distance (insertions, deletions, substitutions and transpositions of
    adjacent characters, each edit anywhere), or ``limit + 1`` when the lengths alone exceed it.

    The unrestricted form, not optimal string alignment: two edits of one spot ("ca" -> "ac"
    -> "abc") must still count as two, or a doubly misspelt secret key would slip through.
    """
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    big = len(a) + len(b)
    last_row: dict[str, int] = {}
    d = [[big] * (len(b) + 2) for _ in range(len(a) + 2)]
    for i in range(len(a) + 1):
        d[i + 1][0], d[i + 1][1] = big, i
    for j in range(len(b) + 1):
        d[0][j + 1], d[1][j + 1] = big, j
    for i in range(1, len(a) + 1):
        last_col = 0
        for j in range(1, len(b) + 1):
            k, seen = last_row.get(b[j - 1], 0), last_col
            cost = 1
            if a[i - 1] == b[j - 1]:
                cost, last_col = 0, j
            d[i + 1][j + 1] = min(
                d[i][j] + cost,
                d[i + 1][j] + 1,
                d[i][j + 1] + 1,
                d[k][seen] + (i - k - 1) + 1 + (j - seen - 1),
            )
        last_row[a[i - 1]] = i
    return d[len(a) + 1][len(b) + 1]


def _bare(key: str) -> str:
    low = key.strip().lower()
    return low[len("kafka.") :] if low.startswith("kafka.") else low


#: Dotted option namespaces that are not Kafka client settings: the Schema Registry client's
#: (its secrets are caught by :func:`is_secret`) and Spark's own configuration.
_NOT_KAFKA_PREFIXES = ("confluent.schema.registry.", "schema.registry.", "spark.")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s._\-]+")


def _normal(key: str) -> str:
    """``key`` as a bare dotted lowercase name: camelCase, ``_`` and ``-`` become dots and the
    namespace prefix goes, so ``confluent.schema.registry.basic.auth.userInfo`` is compared as
    ``basic.auth.user.info``. A prefix (``kafka.``, another client's) says where a setting goes,
    not what it holds, and users spell a key in whichever style their last client used."""
    dotted = _SEPARATORS.sub(".", _CAMEL.sub(".", key.strip())).strip(".").lower()
    stripped = True
    while stripped:
        stripped = False
        for prefix in ("kafka.", *_NOT_KAFKA_PREFIXES):
            if dotted.startswith(prefix):
                dotted, stripped = dotted[len(prefix) :], True
    return dotted


_NORMAL_SECRET_KEYS = frozenset(_normal(key) for key in SECRET_KEYS)


# Cached: every client's config is judged key by key when it is created (logs.client_hooks),
# and the near-miss checks cost about a millisecond per key; the keys are few and recur.
@lru_cache(maxsize=4096)
def is_secret(key: str) -> bool:
    """Whether ``key``'s value is, or nearly certainly is, a secret (see the module notes).

    The key is judged as written (without ``kafka.``) and as :func:`_normal` spells it: either
    looking secret is enough."""
    bare, normal = _bare(key), _normal(key)
    if _SECRET_PATTERN.search(bare) or _SECRET_PATTERN.search(normal):
        return True
    if bare in SAFE_KAFKA_KEYS:
        return False  # none is near a secret key (a unit test checks)
    if any(_distance(bare, secret, 2) <= 2 for secret in SECRET_KEYS):
        return True
    # One edit only from a short secret key: two turn the option ``isKey`` ("is.key") into
    # ``ssl_key`` ("ssl.key").
    for secret in _NORMAL_SECRET_KEYS:
        limit = 2 if len(secret) >= 10 else 1
        if _distance(normal, secret, limit) <= limit:
            return True
    for segment in {*re.split(r"[._\-]", bare), *normal.split(".")}:
        for word in _SECRET_WORDS:
            limit = 2 if len(word) >= 8 else 1
            if _distance(segment, word, limit) <= limit:
                return True
    return False


def kafka_key(key: str) -> bool:
    """Whether ``key`` names a Kafka client setting: ``kafka.``-prefixed (source, sink), or a
    lowercase dotted name as in ``kafkaParams`` outside the namespaces of other clients."""
    low = key.strip()
    if low.lower().startswith("kafka."):
        return True
    return _KAFKA_LIKE.match(low) is not None and not low.startswith(_NOT_KAFKA_PREFIXES)


def may_show(key: str) -> bool:
    """Whether the value of option ``key`` may appear in a message, a log line or a repr."""
    if is_secret(key):
        return False
    return not kafka_key(key) or _bare(key) in SAFE_KAFKA_KEYS


# The user info of a URL ("https://user:password@host"), up to the authority's last '@'.
_URL_USER_INFO = re.compile(r"(?<=://)[^/?#\s]*@")


def shown(key: str, value: object) -> object:
    """``value`` as it may be shown for option ``key``: itself (any URL in it without its
    ``user:password@``), :data:`REDACTED` for a secret, or :data:`HIDDEN` for an unknown Kafka
    key. ``None`` (not set) stays ``None``."""
    if value is None:
        return value
    if may_show(key):
        if isinstance(value, str) and "@" in value:
            return _URL_USER_INFO.sub("<redacted>@", value)
        return value
    return REDACTED if is_secret(key) else HIDDEN


def redact(config: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``config`` whose values are replaced by :func:`shown`, safe to log or show."""
    return {k: shown(k, v) for k, v in config.items()}


#: A value shorter than this is scrubbed only where quoted: replacing every "a" of a text would
#: garble it, and show where the value's letters are.
SHORT = 4

# ``name=value`` pairs inside a secret value (``sasl.oauthbearer.config``, a JAAS line):
# librdkafka quotes parts of it ("Unrecognized sasl.oauthbearer.config beginning at: %s",
# "'\"' cannot appear in principal: %s"), never the whole value.
_PAIR = re.compile(r"""[\w.\-]+=("[^"]*"|'[^']*'|[^\s;]*)""")


class Scrubber:
    """Replaces the given secret values wherever they appear in a text, compiled once.

    A value is matched as given and without its surrounding whitespace; one shorter than
    :data:`SHORT` only where quoted. Its ``repr`` never shows the values.
    """

    def __init__(self, values: Iterable[str], replacement: object = REDACTED) -> None:
        forms = {form for value in values for form in (value, value.strip()) if form.strip()}
        # Longest first, in one pass: no replacement is scrubbed again, and a value that holds
        # another is replaced whole.
        long = sorted((f for f in forms if len(f.strip()) >= SHORT), key=len, reverse=True)
        short = sorted((f for f in forms if len(f.strip()) < SHORT), key=len, reverse=True)
        parts = ["|".join(map(re.escape, long))] if long else []
        if short:
            parts.append(f"(?<=[\"'])(?:{'|'.join(map(re.escape, short))})(?=[\"'])")
        self._pattern = re.compile("|".join(parts)) if parts else None
        self._replacement = str(replacement)
        self._count = len(forms)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda _m: self._replacement, text)

    def __repr__(self) -> str:
        return f"Scrubber({self._count} value(s))"


#: Keys is_secret covers (every sasl.oauthbearer.* setting is hidden when shown) whose values
#: are no secret and are ordinary words ('oidc', 'default', a scope): scrubbing them from
#: librdkafka's text would garble every line.
_PLAIN_IN_TEXT = {"sasl.oauthbearer.method", "sasl.oauthbearer.scope"}


def _secret_values(config: Mapping[str, object]) -> Iterator[str]:
    for key, value in config.items():
        if not isinstance(value, str) or not is_secret(key) or key in _PLAIN_IN_TEXT:
            continue
        yield value
        for pair in _PAIR.finditer(value):
            piece = pair.group(1).strip("\"'")
            # a number alone ("lifeSeconds=3600") is no secret, and replacing it would garble
            # every line that mentions the same number
            yield from (form for form in (pair.group(0), piece) if not form.isdigit())


def config_scrubber(config: Mapping[str, object]) -> Scrubber:
    """The :class:`Scrubber` of the values of ``config``'s secret keys (:func:`is_secret`), and
    of the ``name=value`` pairs inside them: for text a client of ``config`` writes."""
    return Scrubber(_secret_values(config))
