"""A Spark job's Java-client security options, translated to librdkafka's. Pure: plain library,
used where options are parsed (the driver); the stores are read by an injected function
(:mod:`kafka_direct.kafka.keystores` runs the JDK's ``keytool``).

Spark's ``format("kafka")`` takes the Java client's settings; librdkafka has no JAAS, no JKS and
no Java login modules. So that a job moves by changing the format name, :func:`translate`
rewrites them into librdkafka's settings, once, on the driver:

=========================================================  =======================================
Java client (``kafka.`` option)                            librdkafka
=========================================================  =======================================
``sasl.jaas.config`` PlainLoginModule / ScramLoginModule   ``sasl.username``, ``sasl.password``
``sasl.jaas.config`` OAuthBearerLoginModule (clientId,     ``sasl.oauthbearer.method=oidc``,
clientSecret, scope) + ``sasl.oauthbearer.token.           ``sasl.oauthbearer.client.id`` / secret /
endpoint.url``                                             scope / token endpoint
OAuthBearerLoginModule ``unsecuredLoginStringClaim_sub``   an unsecured JWT for that principal
``sasl.jaas.config`` Krb5LoginModule with a keytab         ``sasl.kerberos.keytab`` / principal
``sasl.login.callback.handler.class`` (Kafka's OIDC one)   nothing (librdkafka's OIDC does it)
``ssl.truststore.*`` (JKS, PKCS12, PEM)                    ``ssl.ca.pem``: the certificates inline
``ssl.truststore.certificates``                            ``ssl.ca.pem``
``ssl.keystore.*`` PKCS12                                  the same keys (librdkafka reads PKCS#12)
``ssl.keystore.*`` JKS                                     ``ssl.certificate.pem`` + ``ssl.key.pem``
``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``  ``ssl.certificate.pem`` / ``ssl.key.pem``
``ssl.endpoint.identification.algorithm=`` (empty)         ``none`` (no hostname check, as Java)
=========================================================  =======================================

The truststore's certificates travel inline (``ssl.ca.pem``), so executors need no copy of the
file. A JKS keystore is converted to PEM inline too; its private key travels in the pickled
config as a secret (redacted everywhere, as every key of :mod:`kafka_direct.redaction`). A
PKCS#12 keystore is read by librdkafka itself, so its file must be readable on every executor,
as with the JVM connector. What has no librdkafka equivalent (a custom login module or callback
handler, Kerberos without a keytab, delegation tokens) is refused, naming what to use instead.
A value never appears in an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["JaasEntry", "StoreLoader", "parse_jaas", "translate"]

#: ``load(path, store_type, password, what)`` -> PEM text: "ca" gives the certificates of a
#: truststore; "keystore" gives a keystore's certificate chain then its private key, in clear.
StoreLoader = Callable[[str, str, str | None, str], str]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
#: Kafka's own OIDC login callback handler (3.1+, and its older package): librdkafka's
#: ``sasl.oauthbearer.method=oidc`` does what it does.
OIDC_HANDLERS = {
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
}

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')

_INSTEAD = (
    "librdkafka has no JAAS: set {p}sasl.mechanism with {p}sasl.username and {p}sasl.password "
    "(PLAIN, SCRAM), {p}sasl.oauthbearer.method 'oidc' with its client id, secret and token "
    "endpoint (OAUTHBEARER), or {p}sasl.kerberos.keytab and {p}sasl.kerberos.principal (GSSAPI)."
)


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a ``sasl.jaas.config`` line."""

    module: str
    options: Mapping[str, str]


def parse_jaas(text: str, option: str = "kafka.sasl.jaas.config") -> JaasEntry:
    """``Module required key="value" key=value;`` (what Kafka's Java client takes). The value
    is never shown in an error: a JAAS line holds the password."""
    body = text.strip()
    match = re.match(r"([A-Za-z_$][\w.$]*)\s+(\w+)", body)
    if match is None or match.group(2).lower() not in _FLAGS:
        raise ConfigurationError(
            option,
            REDACTED,
            "'<LoginModule class> required key=\"value\" ...;'",
            "as Kafka's Java client takes it, for example org.apache.kafka.common.security."
            'plain.PlainLoginModule required username="u" password="p";',
        )
    rest = body[match.end() :]
    options: dict[str, str] = {}
    while True:
        token = _TOKEN.match(rest)
        if token is None:
            break
        key, value = token.group(1), token.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[key] = value
        rest = rest[token.end() :]
    if rest.strip() not in ("", ";"):
        raise ConfigurationError(
            option,
            REDACTED,
            "one login module, its options as key=value or key=\"value\", ending with ';'",
            "Kafka's clients take exactly one login module in sasl.jaas.config.",
        )
    return JaasEntry(match.group(1), options)


def _need(entry: JaasEntry, key: str, prefix: str) -> str:
    value = entry.options.get(key)
    if not value:
        raise ConfigurationError(
            f"{prefix}sasl.jaas.config",
            REDACTED,
            f"a {entry.module.rsplit('.', 1)[-1]} with its '{key}' option",
            f'Add {key}="..." to the login module\'s options.',
        )
    return value


def _mechanism(params: Mapping[str, str], allowed: tuple[str, ...], prefix: str,
               module: str) -> str:  # fmt: skip
    chosen = params.get("sasl.mechanism") or params.get("sasl.mechanisms")
    if chosen is None:
        if len(allowed) == 1:
            return allowed[0]
        raise ConfigurationError(
            f"{prefix}sasl.mechanism",
            None,
            " or ".join(f"'{m}'" for m in allowed),
            f"{module.rsplit('.', 1)[-1]} serves several mechanisms: say which, as the Java "
            "client needs too.",
        )
    if chosen.upper() not in allowed:
        raise ConfigurationError(
            f"{prefix}sasl.mechanism",
            chosen,
            " or ".join(f"'{m}'" for m in allowed),
            f"with {module.rsplit('.', 1)[-1]} in sasl.jaas.config.",
        )
    return chosen.upper()


def _from_jaas(params: Mapping[str, str], prefix: str) -> dict[str, str]:
    entry = parse_jaas(params["sasl.jaas.config"], prefix + "sasl.jaas.config")
    for key in ("sasl.username", "sasl.password", "sasl.oauthbearer.client.id"):
        if key in params:
            raise ConfigurationError(
                prefix + key,
                REDACTED,
                "no librdkafka credentials next to sasl.jaas.config",
                f"Set either {prefix}sasl.jaas.config or librdkafka's own keys, not both.",
            )
    if entry.module == PLAIN:
        return {
            "sasl.mechanism": _mechanism(params, ("PLAIN",), prefix, entry.module),
            "sasl.username": _need(entry, "username", prefix),
            "sasl.password": _need(entry, "password", prefix),
        }
    if entry.module == SCRAM:
        if entry.options.get("tokenauth", "").lower() == "true":
            raise ConfigurationError(
                prefix + "sasl.jaas.config",
                REDACTED,
                "a ScramLoginModule without tokenauth",
                "librdkafka has no delegation tokens: authenticate as the user (username and "
                "password) instead.",
            )
        return {
            "sasl.mechanism": _mechanism(
                params, ("SCRAM-SHA-256", "SCRAM-SHA-512"), prefix, entry.module
            ),
            "sasl.username": _need(entry, "username", prefix),
            "sasl.password": _need(entry, "password", prefix),
        }
    if entry.module == OAUTH:
        return _oauth(params, entry, prefix)
    if entry.module == KRB5:
        if entry.options.get("useKeyTab", "").lower() != "true" or not entry.options.get("keyTab"):
            raise ConfigurationError(
                prefix + "sasl.jaas.config",
                REDACTED,
                'a Krb5LoginModule with useKeyTab=true and keyTab="..."',
                "librdkafka logs in to Kerberos from a keytab (or with its own kinit command, "
                f"{prefix}sasl.kerberos.kinit.cmd); a ticket cache of the JVM is not shared.",
            )
        out = {
            "sasl.mechanism": _mechanism(params, ("GSSAPI",), prefix, entry.module),
            "sasl.kerberos.keytab": entry.options["keyTab"],
        }
        if entry.options.get("principal"):
            out["sasl.kerberos.principal"] = entry.options["principal"]
        return out
    raise ConfigurationError(
        prefix + "sasl.jaas.config",
        REDACTED,
        "PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule or Krb5LoginModule",
        f"The login module {entry.module} is Java code librdkafka cannot run. "
        + _INSTEAD.format(p=prefix),
    )


def _oauth(params: Mapping[str, str], entry: JaasEntry, prefix: str) -> dict[str, str]:
    out = {"sasl.mechanism": _mechanism(params, ("OAUTHBEARER",), prefix, entry.module)}
    sub = entry.options.get("unsecuredLoginStringClaim_sub")
    if sub:
        # Kafka's unsecured tokens (tests and development only), as librdkafka makes them.
        out["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        out["sasl.oauthbearer.config"] = f"principal={sub}"
        return out
    endpoint = params.get("sasl.oauthbearer.token.endpoint.url")
    if not endpoint:
        raise ConfigurationError(
            prefix + "sasl.oauthbearer.token.endpoint.url",
            None,
            "the token endpoint of the client-credentials flow",
            "OAuthBearerLoginModule with clientId and clientSecret gets its tokens there, as "
            "in the Java client.",
        )
    out.update(
        {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": _need(entry, "clientId", prefix),
            "sasl.oauthbearer.client.secret": _need(entry, "clientSecret", prefix),
        }
    )
    if entry.options.get("scope"):
        out["sasl.oauthbearer.scope"] = entry.options["scope"]
    extensions = {k[len("extension_") :]: v for k, v in entry.options.items()
                  if k.startswith("extension_")}  # fmt: skip
    if extensions:
        out["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in extensions.items())
    return out


def _store_type(params: Mapping[str, str], key: str) -> str:
    kind = (params.get(key) or "JKS").strip().upper()
    return "PKCS12" if kind in ("PKCS12", "P12", "PFX") else kind


def translate(
    params: Mapping[str, str], *, prefix: str = "kafka.", load_store: StoreLoader | None = None
) -> dict[str, str]:
    """``params`` (librdkafka names without ``prefix``) with the Java client's security settings
    rewritten as librdkafka's (module docstring); everything else as it was."""
    out = dict(params)
    if "sasl.jaas.config" in out:
        out.update(_from_jaas(params, prefix))
        del out["sasl.jaas.config"]
        out.pop("sasl.mechanisms", None)  # librdkafka's alias; sasl.mechanism now says it
    handler = out.get("sasl.login.callback.handler.class")
    if handler is not None and handler.strip() in OIDC_HANDLERS:
        del out["sasl.login.callback.handler.class"]
    algorithm = out.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and not algorithm.strip():
        out["ssl.endpoint.identification.algorithm"] = "none"
    if "ssl.truststore.certificates" in out:
        out["ssl.ca.pem"] = out.pop("ssl.truststore.certificates")
    if "ssl.keystore.certificate.chain" in out:
        out["ssl.certificate.pem"] = out.pop("ssl.keystore.certificate.chain")
    if "ssl.keystore.key" in out:
        out["ssl.key.pem"] = out.pop("ssl.keystore.key")
    if "ssl.truststore.location" in out:
        location = out.pop("ssl.truststore.location")
        kind = _store_type(out, "ssl.truststore.type")
        password = out.pop("ssl.truststore.password", None)
        out.pop("ssl.truststore.type", None)
        if load_store is None:
            raise ConfigurationError(
                prefix + "ssl.truststore.location", location, "a store this process can read"
            )
        out["ssl.ca.pem"] = load_store(location, kind, password, "ca")
    if "ssl.keystore.location" in out:
        kind = _store_type(out, "ssl.keystore.type")
        out.pop("ssl.keystore.type", None)
        if kind == "JKS":
            if load_store is None:
                raise ConfigurationError(
                    prefix + "ssl.keystore.location",
                    out["ssl.keystore.location"],
                    "a store this process can read",
                )
            pem = load_store(
                out.pop("ssl.keystore.location"), kind, out.pop("ssl.keystore.password", None),
                "keystore",
            )  # fmt: skip
            cert, _, key = pem.partition("-----BEGIN PRIVATE KEY-----")
            out["ssl.certificate.pem"] = cert.strip() + "\n"
            out["ssl.key.pem"] = "-----BEGIN PRIVATE KEY-----" + key
            out.pop("ssl.key.password", None)  # the key comes out of the store in clear
        elif kind != "PKCS12":
            raise ConfigurationError(
                prefix + "ssl.keystore.type",
                kind,
                "'JKS' or 'PKCS12'",
                f"For PEM keys set {prefix}ssl.keystore.certificate.chain and "
                f"{prefix}ssl.keystore.key (or librdkafka's {prefix}ssl.certificate.location "
                f"and {prefix}ssl.key.location).",
            )
    return out
