"""The one option reader, and the one ``kafka.*`` parameter validator. Pure: plain library.

Runs wherever options are parsed: the Spark driver's Python processes (the source, the sink and
the DStream API) and, unpickled with a reader or writer, executors.

:class:`OptionReader` reads Spark-style options (the source's and the sink's): names are
case-insensitive (PySpark lower-cases them), values are stripped, a missing option takes its
default from the caller's table, and a near-miss of a known name is refused. Every message names
the option, the value and what was expected, in one wording for every API.

:func:`kafka_params` judges librdkafka settings, however the user passed them: ``kafka.``-prefixed
options (the source, the sink) or a ``kafkaParams`` dict (the DStream API, ``prefix=""``). The
keys the caller owns are refused with what to do instead, Java-only settings with their
librdkafka equivalents, and ``bootstrap.servers`` and ``isolation.level`` are checked once, here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TypeVar

from kafka_direct.config.defaults import parse_bytes, parse_duration_ms
from kafka_direct.config.java_client import translate_java_names
from kafka_direct.config.kafka import KafkaConfig, refuse_jvm_settings
from kafka_direct.config.oauth import OPTION as OAUTH_OPTION
from kafka_direct.config.oauth import provider_spec, with_provider
from kafka_direct.config.security import translate as translate_security
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError
from kafka_direct.redaction import REDACTED, is_secret

__all__ = ["ISOLATION_LEVELS", "OptionReader", "kafka_params", "refuse_near_misses"]

#: The values of ``isolation.level`` librdkafka (and Java) accept.
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

_Choice = TypeVar("_Choice", bound=str)


class OptionReader:
    """Case-insensitive lookup of Spark-style options, with ``defaults`` for the missing ones.

    ``what`` names the options in messages ("source", "sink"). Values are compared as given
    (stripped); ``kafka.`` options are handed on verbatim by :meth:`kafka_options`.
    """

    def __init__(self, raw: Mapping[str, str], defaults: Mapping[str, str], what: str) -> None:
        self.raw = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
        self._defaults = {name.lower(): value for name, value in defaults.items()}
        self._names = [*defaults]
        self.what = what

    def refuse_near_misses(self, *also_known: str) -> None:
        """Refuse an option whose name is a near-miss of a known one (see the function)."""
        refuse_near_misses(self.raw, [*self._names, *also_known], self.what)

    def get(self, name: str) -> str | None:
        """The option as given (stripped), or None when it is not set."""
        value = self.raw.get(name.lower())
        return value.strip() if value is not None else None

    def text(self, name: str) -> str:
        """The option as given (stripped), else its default."""
        value = self.get(name)
        return value if value is not None else self._defaults[name.lower()]

    def boolean(self, name: str) -> bool:
        value = self.text(name)
        if value.lower() not in ("true", "false"):
            raise ConfigurationError(name, value, "'true' or 'false'")
        return value.lower() == "true"

    def integer(self, name: str, *, minimum: int) -> int:
        raw = self.text(name)
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise ConfigurationError(name, raw, f"an integer >= {minimum}")
        return value

    def optional_int(self, name: str, *, minimum: int) -> int | None:
        return None if self.get(name) is None else self.integer(name, minimum=minimum)

    def duration(self, name: str) -> int:
        """Milliseconds, from Spark's duration strings ('15m', '30s', '500ms'; a number is ms)."""
        raw = self.text(name)
        try:
            return parse_duration_ms(raw)
        except ValueError:
            raise ConfigurationError(
                name, raw, "a duration such as '15m', '30s' or '500ms'"
            ) from None

    def byte_size(self, name: str, *, minimum: int, maximum: int) -> int:
        """Bytes, from Spark's size strings ('16m', '512k', '1g'; a bare number is bytes)."""
        raw = self.text(name)
        try:
            value = parse_bytes(raw)
        except ValueError:
            value = -1
        if not minimum <= value <= maximum:
            raise ConfigurationError(
                name,
                raw,
                f"a size from {minimum >> 10}k to {maximum >> 20}m, such as '16m' or '512k' "
                "(a bare number is bytes)",
            )
        return value

    def choice(
        self, name: str, choices: tuple[_Choice, ...], expected: str | None = None
    ) -> _Choice:
        """One of ``choices``, whatever its case; ``expected`` words the list in messages."""
        raw = self.text(name)
        for choice in choices:
            if raw.lower() == choice:
                return choice
        words = [f"'{c}'" for c in choices]
        listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        raise ConfigurationError(name, raw, expected or listed)

    def kafka_options(self) -> dict[str, str]:
        """The ``kafka.*`` options without the prefix, values verbatim: a secret may start or
        end with a space. Judge them with :func:`kafka_params`."""
        return {k[len("kafka.") :]: v for k, v in self.raw.items() if k.startswith("kafka.")}


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


def _load_store(
    path: str, kind: str, password: str | None, what: str, key_password: str | None
) -> str:
    # Imported when a store is named: reading one runs the JDK's keytool (I/O, driver only).
    from kafka_direct.kafka.keystores import load_store

    return load_store(path, kind, password, what, key_password)


#: What stands for a store's PEM where no client is built (``read_stores=False``): not a
#: certificate or a key any TLS library accepts, so a client built on it would fail loudly.
UNREAD_STORE = (
    "-----BEGIN CERTIFICATE-----\nbm90IHJlYWQ=\n-----END CERTIFICATE-----\n"
    "-----BEGIN PRIVATE KEY-----\nbm90IHJlYWQ=\n-----END PRIVATE KEY-----\n"
)


def _unread_store(
    path: str, kind: str, password: str | None, what: str, key_password: str | None
) -> str:
    return UNREAD_STORE


def kafka_params(
    params: Mapping[str, str],
    *,
    owned: Mapping[str, str],
    owner: str,
    prefix: str = "kafka.",
    bootstrap_fix: str = "Set .option('kafka.bootstrap.servers', 'host1:9092,host2:9092').",
    oauth_provider: str | None = None,
    read_stores: bool = True,
) -> KafkaConfig:
    """Judge librdkafka settings (names without ``prefix``, as the user wrote them with it).

    ``owned`` maps the keys ``owner`` ("source", "sink") sets itself to what to do instead;
    ``bootstrap_fix`` says where to add a missing ``bootstrap.servers`` in the caller's terms.
    Values are kept verbatim; a secret's value never appears in a message. ``oauth_provider``
    names a token function (the ``oauthProvider`` option, :mod:`kafka_direct.config.oauth`);
    one already written into ``sasl.oauthbearer.config`` is checked the same way.
    ``read_stores=False`` leaves key and trust stores unread (placeholders stand for their
    PEM): for a process that builds no client with these settings.
    """
    for name, value in params.items():
        reason = owned.get(name)
        if reason is not None:
            shown = REDACTED if is_secret(name) else value
            raise UnsupportedKafkaOptionError(prefix + name, shown, reason, owner=owner)
    spec = oauth_provider or provider_spec(params)
    if spec is not None:
        params = with_provider(params, spec, prefix=prefix, option=OAUTH_OPTION)
    # A Spark job's Java-client security settings, as librdkafka takes them (config.security).
    loader = _load_store if read_stores else _unread_store
    params = translate_security(params, prefix=prefix, load_store=loader)
    # And the few other Java client settings whose names or units differ (config.java_client).
    params = translate_java_names(params, prefix=prefix, producer=owner in ("sink", "command"))
    refuse_jvm_settings(params, prefix=prefix)
    if not params.get("bootstrap.servers", "").strip():
        raise ConfigurationError(
            prefix + "bootstrap.servers",
            params.get("bootstrap.servers"),
            "a comma-separated list of host:port",
            bootstrap_fix,
        )
    level = params.get("isolation.level")
    if level is not None and level not in ISOLATION_LEVELS:
        raise ConfigurationError(
            prefix + "isolation.level", level, "'read_committed' or 'read_uncommitted'"
        )
    return KafkaConfig(params)
