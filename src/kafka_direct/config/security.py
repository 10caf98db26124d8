"""A Spark job's Java-client security options, translated to librdkafka's. Pure: plain library,
used where options are parsed (the driver); the stores are read by an injected function
(:mod:`kafka_direct.kafka.keystores` runs the JDK's ``keytool``).

Spark's ``format("kafka")`` takes the Java client's settings; librdkafka has no JAAS, no JKS and
no Java login modules. So that a job moves by changing the format name, :func:`translate`
rewrites them into librdkafka's settings, once, on the driver:

=========================================================  =======================================
Java client (``kafka.`` option)                            librdkafka
=========================================================  =======================================
``sasl.jaas.config`` (parsed by :mod:`.jaas`)              see the rows below
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
``ssl.keystore.*`` PEM (a file: chain and key)             ``ssl.certificate.pem`` + ``ssl.key.pem``
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

from kafka_direct.config.jaas import JaasEntry, parse_jaas
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["PRIVATE_KEY_PEM", "JaasEntry", "StoreLoader", "parse_jaas", "translate"]

#: ``load(path, store_type, password, what, key_password)`` -> PEM text: "ca" gives the
#: certificates of a truststore; "keystore" gives a keystore's certificate chain then its private
#: key (in clear from a JKS store, opened with ``key_password`` where it differs; as written in a
#: PEM file).
StoreLoader = Callable[[str, str, str | None, str, str | None], str]

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

_INSTEAD = (
    "librdkafka has no JAAS: set {p}sasl.mechanism with {p}sasl.username and {p}sasl.password "
    "(PLAIN, SCRAM), {p}sasl.oauthbearer.method 'oidc' with its client id, secret and token "
    "endpoint (OAUTHBEARER), or {p}sasl.kerberos.keytab and {p}sasl.kerberos.principal (GSSAPI)."
)


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
        if entry.options.get("serviceName") and "sasl.kerberos.service.name" not in params:
            # The Java client takes the service name from the login module when the setting
            # is absent; librdkafka would fall back to "kafka".
            out["sasl.kerberos.service.name"] = entry.options["serviceName"]
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
        out["sasl.oauthbearer.config"] = _unsecured_jwt(entry, prefix)
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


#: Kafka's unsecured-token options and librdkafka's ``sasl.oauthbearer.config`` names for them.
_UNSECURED = {
    "unsecuredLoginStringClaim_sub": "principal",
    "unsecuredLoginPrincipalClaimName": "principalClaimName",
    "unsecuredLoginScopeClaimName": "scopeClaimName",
    "unsecuredLoginLifetimeSeconds": "lifeSeconds",
    "unsecuredLoginListClaim_scope": "scope",
}


def _unsecured_jwt(entry: JaasEntry, prefix: str) -> str:
    """librdkafka's ``sasl.oauthbearer.config`` for Kafka's unsecured-token options:
    ``principal=... [scope=a,b] [lifeSeconds=...] [extension_NAME=...]``, space-separated."""
    parts: list[str] = []
    for key, value in entry.options.items():
        if key.startswith("unsecuredLoginExtension_"):
            name = "extension_" + key[len("unsecuredLoginExtension_") :]
        elif key in _UNSECURED:
            name = _UNSECURED[key]
            if key == "unsecuredLoginListClaim_scope" and value:
                # Kafka's list claims begin with the character that separates their items.
                value = ",".join(item for item in value[1:].split(value[0]) if item)
        elif key.startswith("unsecuredLogin"):
            raise ConfigurationError(
                prefix + "sasl.jaas.config",
                REDACTED,
                "unsecured-token options librdkafka can make: "
                + ", ".join([*_UNSECURED, "unsecuredLoginExtension_<name>"]),
                f"librdkafka's unsecured tokens have no {key}; remove it.",
            )
        else:
            continue
        if not value or any(char.isspace() for char in value):
            raise ConfigurationError(
                prefix + "sasl.jaas.config",
                REDACTED,
                f"a value without spaces for {key}",
                "librdkafka's sasl.oauthbearer.config separates its settings with spaces.",
            )
        parts.append(f"{name}={value}")
    parts.sort(key=lambda part: not part.startswith("principal="))
    return " ".join(parts)


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
        _inline_pem(out, "ssl.truststore.type", "ssl.truststore.certificates", prefix)
        out["ssl.ca.pem"] = out.pop("ssl.truststore.certificates")
    inline_key = [k for k in ("ssl.keystore.certificate.chain", "ssl.keystore.key") if k in out]
    if inline_key:
        _inline_pem(out, "ssl.keystore.type", inline_key[0], prefix)
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
        out["ssl.ca.pem"] = load_store(location, kind, password, "ca", None)
    if "ssl.keystore.location" in out:
        kind = _store_type(out, "ssl.keystore.type")
        out.pop("ssl.keystore.type", None)
        if kind in ("JKS", "PEM"):
            if load_store is None:
                raise ConfigurationError(
                    prefix + "ssl.keystore.location",
                    out["ssl.keystore.location"],
                    "a store this process can read",
                )
            pem = load_store(
                out.pop("ssl.keystore.location"), kind, out.pop("ssl.keystore.password", None),
                "keystore", out.get("ssl.key.password"),
            )  # fmt: skip
            key = PRIVATE_KEY_PEM.search(pem)
            if key is None:  # the loader checked; a stub may not have
                raise ConfigurationError(
                    prefix + "ssl.keystore.location", None, "a keystore holding a private key"
                )
            out["ssl.certificate.pem"] = pem[: key.start()].strip() + "\n"
            out["ssl.key.pem"] = key.group() + "\n"
            if kind == "JKS":
                out.pop("ssl.key.password", None)  # the key comes out of the store in clear
        elif kind != "PKCS12":  # PKCS12: librdkafka reads it from the location
            raise ConfigurationError(
                prefix + "ssl.keystore.type",
                kind,
                "'JKS', 'PKCS12' or 'PEM'",
                f"As in Kafka's Java client; for PEM text set {prefix}ssl.keystore.certificate."
                f"chain and {prefix}ssl.keystore.key instead of a location.",
            )
    return out


#: One PEM private key block, of any kind (PKCS#8, encrypted, RSA, EC).
PRIVATE_KEY_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z]+ )*)PRIVATE KEY-----.+?-----END \1PRIVATE KEY-----", re.DOTALL
)


def _inline_pem(out: dict[str, str], type_key: str, given: str, prefix: str) -> None:
    """Kafka's Java client takes inline certificates and keys only with their store's type
    set to PEM (and refuses them otherwise): that type is dropped, any other refused."""
    kind = out.pop(type_key, "PEM").strip().upper()
    if kind != "PEM":
        raise ConfigurationError(
            prefix + type_key,
            kind,
            f"'PEM' (or no value) with {prefix}{given}",
            f"Inline certificates and keys are PEM text; remove {prefix}{type_key} or set it "
            "to 'PEM'.",
        )
