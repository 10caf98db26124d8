"""The one place where confluent-kafka errors become kafka_direct errors. Plain library: the
Spark driver (admin calls) and executors (fetch).

Every call into confluent-kafka that can raise goes through :func:`kafka_errors`, so users only
ever see :class:`~kafka_direct.errors.KafkaDirectError` subclasses with a sentence about what was
being done. :func:`translate` also gives each error our own verdict on whether waiting can fix
it (``retriable``): librdkafka's own flag is False for most transient failures.
:func:`config_error` turns librdkafka's refusal of a setting into a
:class:`~kafka_direct.errors.ConfigurationError` that names the ``kafka.``-prefixed option.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kafka_direct.errors import (
    ConfigurationError,
    KafkaClientError,
    NotAuthorizedError,
    TopicNotFoundError,
)
from kafka_direct.kafka.authorization import DENIED_CODES, Access
from kafka_direct.redaction import SAFE_KAFKA_KEYS, SECRET_KEYS

__all__ = ["config_error", "kafka_errors", "translate"]

_NOT_FOUND = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}

#: Errors that waiting cannot fix. Anything else may pass (a broker restarting, a leader moving,
#: a request timing out): librdkafka's own ``retriable()`` is False for most of those, such as
#: ``_TRANSPORT`` from a metadata request, so it cannot be the verdict.
_HOPELESS = _NOT_FOUND | {
    KafkaError._INVALID_ARG,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError._FATAL,
    KafkaError._NOT_IMPLEMENTED,
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError.UNSUPPORTED_SASL_MECHANISM,
    KafkaError.INVALID_REQUEST,
}


def translate(
    error: KafkaError | KafkaException | BaseException,
    context: str,
    *,
    access: Access | None = None,
) -> KafkaClientError:
    """Map a librdkafka error to our hierarchy; ``context`` says what we were doing.

    ``retriable`` is our verdict: True unless the error cannot pass by waiting (see _HOPELESS).
    An ``*_AUTHORIZATION_FAILED`` code becomes a
    :class:`~kafka_direct.errors.NotAuthorizedError`: with ``access`` (what the client was
    doing) it names the principal, the operation and the resource, as the driver's checks do.
    """
    if isinstance(error, (TimeoutError, FutureTimeout)):
        return KafkaClientError(f"{context}: timed out", code="_TIMED_OUT", retriable=True)
    kerr = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if isinstance(kerr, KafkaError):
        code = kerr.code()
        if kerr.name() in DENIED_CODES:
            if access is not None:
                return access.refused(kerr.name(), context)
            # Who and what are not known here: Kafka's own words, with the code.
            return NotAuthorizedError(
                f"{context}: {kerr.str()} ({kerr.name()}). {_GRANT}",
                code=kerr.name(), principal="", operations=(),
                resource=DENIED_CODES[kerr.name()], names=(),
            )  # fmt: skip
        cls = TopicNotFoundError if code in _NOT_FOUND else KafkaClientError
        return cls(
            f"{context}: {kerr.str()} ({kerr.name()})",
            code=kerr.name(),
            retriable=bool(kerr.retriable()) or (code not in _HOPELESS and not kerr.fatal()),
        )
    return KafkaClientError(f"{context}: {error}")


_GRANT = (
    "Kafka's authorizer refused the client's principal: grant the operation with "
    "kafka-acls.sh (see the Security page of the docs)."
)


@contextmanager
def kafka_errors(context: str, *, access: Access | None = None) -> Iterator[None]:
    """Translate any confluent-kafka exception raised inside the block."""
    try:
        yield
    except KafkaException as exc:
        raise translate(exc, context, access=access) from exc


# librdkafka's wording when it refuses a setting at client creation.
_BAD_PROPERTY = re.compile(r'property:? "([^"]+)"')
# ... and when it cannot use a TLS or SASL setting ("failed to read certificate #0 from
# ssl.ca.pem", "ssl.certificate.pem failed", "Failed to parse ssl.keystore.location ...").
_SECURITY_PROPERTY = re.compile(r"\b((?:ssl|https|sasl)\.[a-z_.]*[a-z])\b")
#: librdkafka settings that kafka_direct writes from the Java client's (config.security): what
#: the user set to get them.
_MADE_FROM = {
    "ssl.ca.pem": "{p}ssl.truststore.location or {p}ssl.truststore.certificates",
    "ssl.certificate.pem": "{p}ssl.keystore.location or {p}ssl.keystore.certificate.chain",
    "ssl.key.pem": "{p}ssl.keystore.location or {p}ssl.keystore.key",
    "https.ca.pem": "the ssl.truststore.* options in {p}sasl.jaas.config",
}


def config_error(
    exc: KafkaException, user: Mapping[str, Any], *, prefix: str = "kafka."
) -> ConfigurationError | None:
    """A :class:`ConfigurationError` naming the user's option, if librdkafka refused a setting
    while creating a client (``_INVALID_ARG``); None for any other error. ``user`` is what the
    user set (without ``prefix``), so a setting of the library's own is not blamed on them."""
    kerr = exc.args[0] if exc.args else None
    if not isinstance(kerr, KafkaError) or kerr.code() != KafkaError._INVALID_ARG:
        return None
    text = kerr.str()
    found = _BAD_PROPERTY.search(text) or _SECURITY_PROPERTY.search(text)
    name = found.group(1) if found else None
    if "No provider for SASL mechanism" in text:
        # Kerberos (GSSAPI) is the default mechanism: the user may have named none.
        return ConfigurationError(
            prefix + "sasl.mechanism",
            user.get("sasl.mechanism", user.get("sasl.mechanisms")),
            "a SASL mechanism the installed librdkafka has",
            f"librdkafka said: {text}. Without {prefix}sasl.mechanism, SASL means GSSAPI "
            "(Kerberos), which confluent-kafka's wheels from PyPI lack (docs/security.md, "
            "Kerberos).",
        )
    if name in _MADE_FROM and name in user:
        return ConfigurationError(
            prefix + name,
            user[name],
            "certificates and keys librdkafka can read",
            f"librdkafka said: {text}. kafka_direct made {prefix}{name} from "
            f"{_MADE_FROM[name].format(p=prefix)}: check what they hold.",
        )
    if name is None or name not in user:
        return ConfigurationError(
            f"{prefix}*",
            None,
            "settings librdkafka accepts",
            f"librdkafka refused the client configuration: {text}. Check the '{prefix}' options; "
            "if none of them is involved, the installed librdkafka may be too old.",
        )
    close = difflib.get_close_matches(name.lower(), SAFE_KAFKA_KEYS | SECRET_KEYS, 1, 0.8)
    guess = f" Did you mean '{prefix}{close[0]}'?" if close and close[0] != name else ""
    return ConfigurationError(
        prefix + name,
        user[name],  # ConfigurationError decides whether it may be shown
        "a setting librdkafka accepts",
        f"librdkafka refused it: {text}.{guess} Check the name and value against librdkafka's "
        "CONFIGURATION.md (most Java client settings have the same name).",
    )
