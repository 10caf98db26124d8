"""SASL sign-in: a ``sasl.jaas.config`` line parsed as Kafka's Java client parses it (its
``JaasConfig``, on Java's ``StreamTokenizer``), its password and Kerberos login modules
translated to librdkafka's settings, and what librdkafka cannot run refused: Java callback
handlers and login modules (a cloud's named as such, with ``oauthProvider`` to use instead), and
Kerberos where the installed librdkafka was built without it. Pure: plain library, used where
options are parsed (the driver); librdkafka's build is asked through an injected function
(:func:`librdkafka_has` by default). Nothing parsed is ever shown: a JAAS line holds the
password.

The line is one login module, its control flag, its options with values bare or quoted with
``"`` or ``'``, Java's escapes in quoted values, and ``//`` and ``/* */`` comments anywhere
outside quotes (between the module and its flag too). The module's name may be quoted, as the
tokenizer takes any token there. Databricks' runtime shades Kafka's client under
``kafkashaded.``: its ``kafkashaded.org.apache.kafka...`` modules are Kafka's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = [
    "KRB5",
    "OAUTH",
    "OIDC_HANDLERS",
    "PLAIN",
    "SCRAM",
    "JaasEntry",
    "java_code",
    "judge_handlers",
    "kerberos_available",
    "kerberos_login",
    "librdkafka_has",
    "login_mechanism",
    "need",
    "parse_jaas",
    "password_login",
]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
#: Where Databricks' runtime shades Kafka's client classes.
SHADED = "kafkashaded."

_FLAGS = ("required", "requisite", "sufficient", "optional")
#: Java's StreamTokenizer escapes in a quoted value (the tokenizer of Kafka's JaasConfig).
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_KEY = re.compile(r"[A-Za-z0-9_.\-$]+")
_BARE = re.compile(r"[^\s;\"']+")
_WORD = re.compile(r"[A-Za-z_$][\w.$\-]*")


class _JaasSyntaxError(ValueError):
    """Where a JAAS line stops parsing; never carries the line's text."""


def _skip(text: str, i: int) -> int:
    """Past whitespace and comments (``// ...`` to the line's end, ``/* ... */``), as Kafka's
    JaasConfig tokenizer skips them."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        else:
            break
    return i


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The value quoted at ``text[i]`` (``"`` or ``'``), unescaped as Java's StreamTokenizer
    does; and the index past its closing quote."""
    quote, out, i = text[i], [], i + 1
    while i < len(text) and text[i] != quote:
        char = text[i]
        if char in "\n\r":
            raise _JaasSyntaxError("a quoted value runs past the end of its line")
        if char == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            octal = re.match(r"[0-3][0-7]{0,2}|[4-7][0-7]?", text[i + 1 : i + 4])
            if octal:
                out.append(chr(int(octal.group(), 8)))
                i += 1 + len(octal.group())
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(char)
        i += 1
    if i >= len(text):
        raise _JaasSyntaxError("a quoted value has no closing quote")
    return "".join(out), i + 1


def _word(text: str, i: int) -> tuple[str, int] | None:
    """A bare word or a quoted token at ``text[i]`` (as the tokenizer takes a module's name and
    its flag), and the index past it; None when neither is there."""
    if i < len(text) and text[i] in "\"'":
        return _quoted(text, i)
    match = _WORD.match(text, i)
    return (match.group(), match.end()) if match else None


def _jaas_options(text: str, i: int) -> dict[str, str]:
    """``key=value`` pairs from ``text[i]`` up to the closing ``;``: values quoted with ``"``
    or ``'`` or bare."""
    options: dict[str, str] = {}
    i = _skip(text, i)
    while i < len(text) and text[i] != ";":
        key = _KEY.match(text, i)
        if key is None:
            raise _JaasSyntaxError("an option has no name")
        i = _skip(text, key.end())
        if i >= len(text) or text[i] != "=":
            raise _JaasSyntaxError("an option has no '='")
        i = _skip(text, i + 1)
        if i < len(text) and text[i] in "\"'":
            value, i = _quoted(text, i)
        else:
            bare = _BARE.match(text, i)
            if bare is None:
                raise _JaasSyntaxError("an option has no value")
            value, i = bare.group(), bare.end()
        options[key.group()] = value
        i = _skip(text, i)
    if i >= len(text):
        return options  # Java wants the ';'; a line without it has always been taken here
    if _skip(text, i + 1) != len(text):
        raise _JaasSyntaxError("more follows the login module's ';'")
    return options


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a ``sasl.jaas.config`` line."""

    module: str
    #: Holds the password: never in a repr.
    options: Mapping[str, str] = field(repr=False)

    @property
    def short(self) -> str:
        """The module's class name without its package, for messages."""
        return self.module.rsplit(".", 1)[-1]


def _unshaded(module: str) -> str:
    # Only Kafka's own classes are shaded there; anything else keeps its name (and is refused).
    if module.startswith(SHADED + "org.apache.kafka."):
        return module[len(SHADED) :]
    return module


def parse_jaas(text: str, option: str = "kafka.sasl.jaas.config") -> JaasEntry:
    """``Module required key="value" key=value;`` (what Kafka's Java client takes). The value
    is never shown in an error: a JAAS line holds the password."""
    try:
        module = _word(text, _skip(text, 0))
        flag = _word(text, _skip(text, module[1])) if module else None
    except _JaasSyntaxError:
        module = flag = None
    if module is None or flag is None or flag[0].lower() not in _FLAGS:
        raise ConfigurationError(
            option,
            REDACTED,
            "'<LoginModule class> required key=\"value\" ...;'",
            "as Kafka's Java client takes it, for example org.apache.kafka.common.security."
            'plain.PlainLoginModule required username="u" password="p";',
        )
    try:
        options = _jaas_options(text, flag[1])
    except _JaasSyntaxError as exc:
        raise ConfigurationError(
            option,
            REDACTED,
            "one login module, its options as key=value, key=\"value\" or key='value', "
            "ending with ';'",
            f"Kafka's clients take exactly one login module in sasl.jaas.config: {exc}.",
        ) from None
    return JaasEntry(_unshaded(module[0].strip()), options)


# -- translation ---------------------------------------------------------------------------------


def need(entry: JaasEntry, key: str, prefix: str) -> str:
    """The login module's option ``key``, which it cannot do without."""
    value = entry.options.get(key)
    if not value:
        raise ConfigurationError(
            f"{prefix}sasl.jaas.config",
            REDACTED,
            f"a {entry.short} with its '{key}' option",
            f'Add {key}="..." to the login module\'s options.',
        )
    return value


def login_mechanism(
    params: Mapping[str, str], allowed: tuple[str, ...], prefix: str, entry: JaasEntry
) -> str:
    """The SASL mechanism for ``entry``: the one the settings name, which must be one it
    serves, else the only one it serves."""
    chosen = params.get("sasl.mechanism") or params.get("sasl.mechanisms")
    if chosen is None:
        if len(allowed) == 1:
            return allowed[0]
        raise ConfigurationError(
            f"{prefix}sasl.mechanism",
            None,
            " or ".join(f"'{m}'" for m in allowed),
            f"{entry.short} serves several mechanisms: say which, as the Java client needs too.",
        )
    if chosen.strip().upper() not in allowed:
        raise ConfigurationError(
            f"{prefix}sasl.mechanism",
            chosen,
            " or ".join(f"'{m}'" for m in allowed),
            f"with {entry.short} in sasl.jaas.config.",
        )
    return chosen.strip().upper()


def password_login(params: Mapping[str, str], entry: JaasEntry, prefix: str) -> dict[str, str]:
    """librdkafka's settings for PlainLoginModule or ScramLoginModule."""
    if entry.module == SCRAM and entry.options.get("tokenauth", "").strip().lower() == "true":
        raise ConfigurationError(
            prefix + "sasl.jaas.config",
            REDACTED,
            "a ScramLoginModule without tokenauth",
            "librdkafka has no delegation tokens: authenticate as the user (username and "
            "password) instead.",
        )
    allowed = ("PLAIN",) if entry.module == PLAIN else ("SCRAM-SHA-256", "SCRAM-SHA-512")
    return {
        "sasl.mechanism": login_mechanism(params, allowed, prefix, entry),
        "sasl.username": need(entry, "username", prefix),
        "sasl.password": need(entry, "password", prefix),
    }


def kerberos_login(params: Mapping[str, str], entry: JaasEntry, prefix: str) -> dict[str, str]:
    """librdkafka's settings for Krb5LoginModule with a keytab (librdkafka runs its own kinit
    with them)."""
    if entry.options.get("useKeyTab", "").lower() != "true" or not entry.options.get("keyTab"):
        raise ConfigurationError(
            prefix + "sasl.jaas.config",
            REDACTED,
            'a Krb5LoginModule with useKeyTab=true and keyTab="..."',
            "librdkafka logs in to Kerberos from a keytab (or with its own kinit command, "
            f"{prefix}sasl.kerberos.kinit.cmd); a ticket cache of the JVM is not shared.",
        )
    out = {
        "sasl.mechanism": login_mechanism(params, ("GSSAPI",), prefix, entry),
        "sasl.kerberos.keytab": entry.options["keyTab"],
    }
    if entry.options.get("principal"):
        out["sasl.kerberos.principal"] = entry.options["principal"]
    if entry.options.get("serviceName") and "sasl.kerberos.service.name" not in params:
        # The Java client takes the service name from the login module when the setting is
        # absent; librdkafka would fall back to "kafka".
        out["sasl.kerberos.service.name"] = entry.options["serviceName"]
    return out


# -- what librdkafka cannot run ------------------------------------------------------------------

#: Kafka's own OIDC login callback handler (3.1+, and its older package): librdkafka's
#: ``sasl.oauthbearer.method=oidc`` does what it does.
OIDC_HANDLERS = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
}

_INSTEAD = (
    "librdkafka has no JAAS: set {p}sasl.mechanism with {p}sasl.username and {p}sasl.password "
    "(PLAIN, SCRAM), {p}sasl.oauthbearer.method 'oidc' with its client id, secret and token "
    "endpoint (OAUTHBEARER), or {p}sasl.kerberos.keytab and {p}sasl.kerberos.principal (GSSAPI)."
)
_CLOUD_TOKENS = (
    " For a cloud's tokens (Amazon MSK IAM, Microsoft Entra, Google Cloud), name a Python "
    "function that returns them with the option 'oauthProvider' and set {p}sasl.mechanism "
    "'OAUTHBEARER' (docs/security.md, Cloud tokens)."
)
#: Java classes of clouds' sign-ins (their packages), and the cloud.
_CLOUDS = {
    "software.amazon.msk.auth.iam.": "Amazon MSK IAM",
    "com.google.cloud.hosted.kafka.auth.": "Google Cloud's Managed Kafka",
}


def _cloud(java_class: str) -> str | None:
    return next((name for pkg, name in _CLOUDS.items() if java_class.startswith(pkg)), None)


def java_code(java_class: str, what: str, prefix: str) -> str:
    """Why a Java class cannot be taken, and what to set instead."""
    cloud = _cloud(java_class)
    if cloud is not None:
        return (
            f"{cloud} signs in with tokens its SDK makes, which librdkafka cannot run as Java "
            "code: name a Python function that returns them with the option 'oauthProvider', "
            f"set {prefix}sasl.mechanism 'OAUTHBEARER', and remove {prefix}sasl.jaas.config and "
            "the callback handler settings (docs/security.md, Cloud tokens)."
        )
    return f"{what} is Java code librdkafka cannot run. " + (_INSTEAD + _CLOUD_TOKENS).format(
        p=prefix
    )


def judge_handlers(out: dict[str, str], prefix: str) -> None:
    """Drop Kafka's own OIDC login handler (librdkafka's OIDC does its work); refuse any other
    Java callback handler or login class, naming what to set instead (a cloud's: oauthProvider)."""
    for key in ("sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
                "sasl.login.class"):  # fmt: skip
        java_class = out.get(key)
        if java_class is None:
            continue
        if key == "sasl.login.callback.handler.class" and java_class in OIDC_HANDLERS:
            del out[key]
            continue
        raise ConfigurationError(
            prefix + key,
            java_class,
            "a librdkafka setting: this is a JVM (Java Kafka client) setting naming a Java class",
            java_code(java_class, "It", prefix),
        )


@functools.cache
def librdkafka_has(feature: str) -> bool:
    """Whether the installed librdkafka was built with ``feature`` (one of its
    ``builtin.features``). librdkafka checks such a value when it is set, before a client
    exists, so a missing feature costs no client; a present one, a client without brokers."""
    # The one call into confluent-kafka here, made only when a setting needs the answer.
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({"builtin.features": feature, "log_level": 0})
    except KafkaException:
        return False
    return True


def kerberos_available(out: Mapping[str, str], entry: JaasEntry | None, protocol: str,
                        prefix: str, has_feature: Callable[[str], bool]) -> None:  # fmt: skip
    """Refuse GSSAPI (Kerberos) when the installed librdkafka was built without it: its
    clients would fail at creation, naming no option of the user's."""
    named = [k for k in ("sasl.mechanism", "sasl.mechanisms") if k in out]
    if entry is not None:
        if entry.module != KRB5:
            return
        option, value = prefix + "sasl.jaas.config", REDACTED
        why = "Krb5LoginModule signs in with Kerberos (SASL mechanism GSSAPI)"
    elif named:
        option, value = prefix + named[0], out[named[0]]
        if value.strip().upper() != "GSSAPI":
            return
        why = "SASL mechanism GSSAPI is Kerberos"
    else:
        option, value = prefix + "security.protocol", protocol
        why = (
            f"{protocol} without {prefix}sasl.mechanism means GSSAPI (Kerberos), in the Java "
            "client and librdkafka alike; if the cluster takes another mechanism, set "
            f"{prefix}sasl.mechanism ('PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512', 'OAUTHBEARER')"
        )
    if has_feature("sasl_gssapi"):
        return
    raise ConfigurationError(
        option,
        value,
        "a SASL mechanism the installed librdkafka has: it was built without Kerberos "
        "(its builtin.features lack sasl_gssapi, as in confluent-kafka's wheels from PyPI)",
        f"{why}. Kerberos needs a librdkafka built with Cyrus SASL (libsasl2): install it with "
        "its development files and libsasl2's GSSAPI module (from Confluent's or the "
        "distribution's packages, e.g. librdkafka-dev and libsasl2-modules-gssapi-mit), then "
        "confluent-kafka from source: pip install --no-binary confluent-kafka confluent-kafka "
        "(docs/security.md, Kerberos).",
    )
