"""A Spark job's Java-client security options, translated to librdkafka's. Pure: plain library,
used where options are parsed (the driver); the stores are read by an injected function
(:mod:`kafka_direct.kafka.keystores` runs the JDK's ``keytool``), and whether the installed
librdkafka has Kerberos is asked of an injected function too.

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
endpoint.url`` (:mod:`.oauth`)                             scope / token endpoint
OAuthBearerLoginModule ``ssl.truststore.*`` options        ``https.ca.pem`` (for the token endpoint)
OAuthBearerLoginModule ``unsecuredLoginStringClaim_sub``   an unsecured JWT for that principal
``sasl.jaas.config`` Krb5LoginModule with a keytab         ``sasl.kerberos.keytab`` / principal
``sasl.login.callback.handler.class`` (Kafka's OIDC one)   nothing (librdkafka's OIDC does it)
``ssl.truststore.*`` (JKS, PKCS12, PEM)                    ``ssl.ca.pem``: the certificates inline
``ssl.truststore.certificates``                            ``ssl.ca.pem``
``ssl.truststore.type`` alone                              nothing: the system's CAs (Java: JVM's)
``ssl.keystore.*`` JKS, PKCS12, PEM (a file)               ``ssl.certificate.pem`` + ``ssl.key.pem``
``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``  ``ssl.certificate.pem`` / ``ssl.key.pem``
``ssl.protocol``, ``ssl.enabled.protocols`` TLSv1.2/1.3    nothing: librdkafka negotiates 1.2 or 1.3
``ssl.endpoint.identification.algorithm=`` (empty)         ``none`` (no hostname check, as Java)
=========================================================  =======================================

As Java's ``ConfigDef`` does, the values of these Java settings are trimmed (a password read
from a file keeps no newline); librdkafka's own settings (``sasl.password``...) stay as given.
As in the Java client, TLS settings count only for ``security.protocol`` SSL or SASL_SSL and
SASL settings (the JAAS line, callback handlers) only for SASL_PLAINTEXT or SASL_SSL: with
another protocol they are dropped with a warning, and never read.

The stores' certificates and keys travel inline, so executors need no copy of the files; a
keystore's private key travels in the pickled config as a secret (redacted everywhere, as
every key of :mod:`kafka_direct.redaction`). What has no librdkafka equivalent (a custom login
module or callback handler, Kerberos without a keytab or without a librdkafka built for it,
delegation tokens, a TLS version below 1.2) is refused, naming what to use instead. A value
never appears in an error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

from kafka_direct.config.jaas import (
    KRB5,
    OAUTH,
    PLAIN,
    SCRAM,
    JaasEntry,
    java_code,
    judge_handlers,
    kerberos_available,
    kerberos_login,
    librdkafka_has,
    parse_jaas,
    password_login,
)
from kafka_direct.config.oauth import oauth_login
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["PRIVATE_KEY_PEM", "JaasEntry", "StoreLoader", "parse_jaas", "translate"]

log = logging.getLogger(__name__)

#: ``load(path, store_type, password, what, key_password)`` -> PEM text: "ca" gives the
#: certificates a truststore trusts; "keystore" gives a keystore's certificate chain then its
#: private key (in clear from a JKS or PKCS12 store, opened with ``key_password`` where it
#: differs; as written in a PEM file).
StoreLoader = Callable[[str, str, str | None, str, str | None], str]

#: Java settings whose values Kafka's ``ConfigDef`` trims (every STRING, PASSWORD, LIST and
#: CLASS value is), among those this module reads or that name a protocol or mechanism. (PEM
#: text is left as it is: the blanks around its blocks are nothing to OpenSSL.)
JAVA_TRIMMED = frozenset(
    {
        "security.protocol", "sasl.mechanism", "sasl.jaas.config",
        "sasl.kerberos.service.name", "sasl.oauthbearer.token.endpoint.url",
        "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
        "sasl.login.class", "ssl.protocol", "ssl.enabled.protocols",
        "ssl.endpoint.identification.algorithm", "ssl.truststore.location",
        "ssl.truststore.password", "ssl.truststore.type", "ssl.keystore.location",
        "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password",
    }
)  # fmt: skip

#: Java settings read only when the protocol has SASL (the Java client loads no JAAS otherwise).
_SASL_ONLY = ("sasl.jaas.config", "sasl.login.callback.handler.class",
              "sasl.client.callback.handler.class", "sasl.login.class")  # fmt: skip
#: Java settings read only when the protocol has TLS (the Java client builds no TLS otherwise).
_TLS_ONLY = ("ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
             "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.password",
             "ssl.keystore.type", "ssl.keystore.key", "ssl.keystore.certificate.chain",
             "ssl.key.password", "ssl.protocol", "ssl.enabled.protocols",
             "ssl.engine.factory.class")  # fmt: skip


def translate(
    params: Mapping[str, str],
    *,
    prefix: str = "kafka.",
    load_store: StoreLoader | None = None,
    has_feature: Callable[[str], bool] | None = None,
) -> dict[str, str]:
    """``params`` (librdkafka names without ``prefix``) with the Java client's security settings
    rewritten as librdkafka's (module docstring); everything else as it was. ``has_feature``
    tells whether librdkafka has one of its ``builtin.features`` (default: the installed one)."""
    out = {k: v.strip() if k in JAVA_TRIMMED else v for k, v in params.items()}
    protocol = out.get("security.protocol", "PLAINTEXT").upper()
    # An unknown protocol keeps both layers' settings: librdkafka refuses it by name.
    _unused_layer(out, _SASL_ONLY, protocol, protocol in ("PLAINTEXT", "SSL"), prefix)
    _unused_layer(out, _TLS_ONLY, protocol, protocol in ("PLAINTEXT", "SASL_PLAINTEXT"), prefix)
    _sasl(out, protocol, prefix, load_store, has_feature or librdkafka_has)
    algorithm = out.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and not algorithm:
        out["ssl.endpoint.identification.algorithm"] = "none"
    for key in ("ssl.protocol", "ssl.enabled.protocols"):
        if key in out:
            _tls_versions(key, out.pop(key), prefix + key)
    _stores(out, prefix, load_store)
    return out


def _unused_layer(out: dict[str, str], keys: tuple[str, ...], protocol: str, unused: bool,
                  prefix: str) -> None:  # fmt: skip
    """Drop ``keys`` from ``out`` when the protocol does not use their layer (``unused``), as
    the Java client never reads them then; a warning names them, never their values."""
    given = [key for key in keys if key in out]
    if not unused or not given:
        return
    for key in given:
        del out[key]
    layer = "SASL" if keys is _SASL_ONLY else "TLS"
    log.warning(
        "%s: ignored, as the Java client ignores them: %ssecurity.protocol is '%s', which uses "
        "no %s.",
        ", ".join(prefix + key for key in given),
        prefix,
        protocol,
        layer,
    )


# -- SASL ----------------------------------------------------------------------------------------


def _sasl(out: dict[str, str], protocol: str, prefix: str, load_store: StoreLoader | None,
          has_feature: Callable[[str], bool]) -> None:  # fmt: skip
    # The handlers first: a cloud's JAAS line is only understood next to its handler.
    judge_handlers(out, prefix)
    entry = None
    if "sasl.jaas.config" in out:
        entry = parse_jaas(out.pop("sasl.jaas.config"), prefix + "sasl.jaas.config")
        for key in ("sasl.username", "sasl.password", "sasl.oauthbearer.client.id"):
            if key in out:
                raise ConfigurationError(
                    prefix + key,
                    REDACTED,
                    "no librdkafka credentials next to sasl.jaas.config",
                    f"Set either {prefix}sasl.jaas.config or librdkafka's own keys, not both.",
                )
    # Only a protocol librdkafka knows: it refuses a misspelt one by name ('SASL_PLAINTXT').
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        kerberos_available(out, entry, protocol, prefix, has_feature)
    if entry is None:
        return
    if entry.module in (PLAIN, SCRAM):
        login = password_login(out, entry, prefix)
    elif entry.module == OAUTH:
        login = oauth_login(out, entry, prefix,
                            lambda tls, option: _idp_trust(tls, option, load_store))  # fmt: skip
    elif entry.module == KRB5:
        login = kerberos_login(out, entry, prefix)
    else:
        raise ConfigurationError(
            prefix + "sasl.jaas.config",
            REDACTED,
            "PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule or Krb5LoginModule",
            java_code(entry.module, f"The login module {entry.module}", prefix),
        )
    out.pop("sasl.mechanisms", None)  # librdkafka's alias; sasl.mechanism now says it
    out.update(login)


def _idp_trust(tls: Mapping[str, str], option: str, load_store: StoreLoader | None) -> str | None:
    """The identity provider's trust (``https.ca.pem``) from a login module's ``ssl.*``
    options, which Kafka's OIDC login reads as the Java client's TLS settings; None for the
    system's CAs."""
    tls = {k: v if k == "ssl.truststore.certificates" else v.strip() for k, v in tls.items()}
    for key in ("ssl.protocol", "ssl.enabled.protocols"):
        if key in tls:
            _tls_versions(key, tls.pop(key), option)
    for key in ("ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.provider",
                "ssl.secure.random.implementation"):  # fmt: skip
        if tls.pop(key, None) is not None:
            log.warning("%s: the login module's %s only tunes the JVM's TLS: ignored.",
                        option, key)  # fmt: skip
    if tls.get("ssl.endpoint.identification.algorithm", "https").lower() == "https":
        tls.pop("ssl.endpoint.identification.algorithm", None)
    handled = {"ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
               "ssl.truststore.certificates"}  # fmt: skip
    others = sorted(set(tls) - handled)
    if others:
        raise ConfigurationError(
            option,
            REDACTED,
            "only ssl.truststore.*, ssl.protocol and ssl.enabled.protocols among the login "
            "module's ssl.* options (the TLS of its token requests)",
            "librdkafka's token requests take a CA (https.ca.pem) and nothing else: remove "
            f"{', '.join(others)} (librdkafka sends the identity provider no client "
            "certificate, and always checks its host name).",
        )
    return _truststore(tls, load_store, "the identity provider's", jaas=option)


# -- TLS -----------------------------------------------------------------------------------------

#: What librdkafka (OpenSSL 3) negotiates, whatever it is told: TLS 1.2 or 1.3. ``TLS`` and
#: ``SSL`` are Java's names for "any version the JVM enables", which are those two.
_TLS_CONTEXTS = {"TLS", "SSL", "TLSV1.2", "TLSV1.3"}
_TLS_VERSIONS = {"TLSV1.2", "TLSV1.3"}


def _tls_versions(key: str, value: str, option: str) -> None:
    """Drop ``ssl.protocol`` / ``ssl.enabled.protocols`` (librdkafka has neither) when their
    value asks for what librdkafka does anyway; refuse a version it cannot speak. ``option``
    names the setting as the user wrote it (or the JAAS line that holds it)."""
    in_jaas = option.endswith("sasl.jaas.config")
    shown = f"{option} (its {key})" if in_jaas else option
    allowed = _TLS_CONTEXTS if key == "ssl.protocol" else _TLS_VERSIONS
    versions = [v.strip() for v in value.split(",") if v.strip()]
    if any(v.upper() not in allowed for v in versions) or (key == "ssl.protocol" and not versions):
        raise ConfigurationError(
            option,
            REDACTED if in_jaas else value,
            f"{'its ' + key if in_jaas else 'a value'} of 'TLSv1.2' or 'TLSv1.3'"
            + (" (or 'TLS')" if key == "ssl.protocol" else ""),
            "librdkafka negotiates TLS 1.2 or 1.3 and cannot be given another version; remove "
            "the setting (the Java client enables TLSv1.2 and TLSv1.3 by default).",
        )
    log.warning(
        "%s: librdkafka has no such setting; it negotiates TLSv1.2 or TLSv1.3, which is what "
        "this value allows (it cannot be held to one of them): ignored.",
        shown,
    )


def _store_type(value: str | None) -> str:
    kind = (value or "JKS").strip().upper()
    return "PKCS12" if kind in ("PKCS12", "P12", "PFX") else kind


def _load(load_store: StoreLoader | None, option: str, prefix: str, path: str, kind: str,
          password: str | None, what: str, key_password: str | None) -> str:  # fmt: skip
    """``load_store``'s PEM, its refusals naming the option as the user wrote it."""
    if load_store is None:
        raise ConfigurationError(option, path, "a store this process can read")
    try:
        return load_store(path, kind, password, what, key_password)
    except ConfigurationError as exc:
        if exc.option == option or not exc.option.startswith("kafka.ssl."):
            raise
        shown = exc.value if not option.endswith("jaas.config") else REDACTED
        raise ConfigurationError(
            option,
            shown,
            exc.expected.replace("kafka.ssl.", prefix + "ssl."),
            (exc.fix or "").replace("kafka.ssl.", prefix + "ssl.") or None,
        ) from None


def _truststore(tls: dict[str, str], load_store: StoreLoader | None, whose: str, *,
                prefix: str = "", jaas: str | None = None) -> str | None:  # fmt: skip
    """The PEM of the truststore ``tls`` names (its ``ssl.truststore.*`` keys, removed), or
    None for the system's CAs. ``prefix`` says how the user wrote the settings; ``jaas``, the
    JAAS line's option when they are a login module's options."""
    location = tls.pop("ssl.truststore.location", None)
    certificates = tls.pop("ssl.truststore.certificates", None)
    password = tls.pop("ssl.truststore.password", None)
    kind = tls.pop("ssl.truststore.type", None)
    where = jaas
    if location is None and certificates is None:
        if password is not None:
            # The Java client refuses this too (DefaultSslEngineFactory).
            raise ConfigurationError(
                where or prefix + "ssl.truststore.password",
                REDACTED,
                "a truststore password only with its truststore",
                f"Set {prefix}ssl.truststore.location too, or remove the password: without a "
                "truststore, the system's CA certificates are trusted (as the JVM's are).",
            )
        if kind is not None:
            log.warning(
                "%s: a truststore type without a truststore: %s CA certificates are the "
                "system's (ca-certificates), as the Java client's are the JVM's.",
                where or prefix + "ssl.truststore.type",
                whose,
            )
        return None
    if certificates is not None:
        if kind is not None and _store_type(kind) != "PEM":
            raise ConfigurationError(
                where or prefix + "ssl.truststore.type",
                kind,
                f"'PEM' (or no value) with {prefix}ssl.truststore.certificates",
                f"Inline certificates are PEM text; remove {prefix}ssl.truststore.type or set "
                "it to 'PEM'.",
            )
        if location is not None:
            raise ConfigurationError(
                where or prefix + "ssl.truststore.certificates",
                REDACTED,
                f"either {prefix}ssl.truststore.location or {prefix}ssl.truststore.certificates",
                "The Java client refuses both: keep one.",
            )
        return certificates
    assert location is not None
    return _load(load_store, where or prefix + "ssl.truststore.location", prefix, location,
                 _store_type(kind), password, "ca", None)  # fmt: skip


def _stores(out: dict[str, str], prefix: str, load_store: StoreLoader | None) -> None:
    tls = {k: out.pop(k) for k in list(out) if k.startswith("ssl.truststore.")}
    ca = _truststore(tls, load_store, "the brokers'", prefix=prefix)
    out.update(tls)  # anything else under ssl.truststore. is librdkafka's to refuse
    if ca is not None:
        out["ssl.ca.pem"] = ca
    inline = [k for k in ("ssl.keystore.certificate.chain", "ssl.keystore.key") if k in out]
    if inline:
        if "ssl.keystore.location" in out:
            raise ConfigurationError(
                prefix + "ssl.keystore.location",
                out["ssl.keystore.location"],
                f"either {prefix}ssl.keystore.location or {prefix}{inline[0]}",
                "The Java client refuses both: keep one.",
            )
        kind = out.pop("ssl.keystore.type", "PEM")
        if _store_type(kind) != "PEM":
            raise ConfigurationError(
                prefix + "ssl.keystore.type",
                kind,
                f"'PEM' (or no value) with {prefix}{inline[0]}",
                f"Inline certificates and keys are PEM text; remove {prefix}ssl.keystore.type or "
                "set it to 'PEM'.",
            )
        if "ssl.keystore.certificate.chain" in out:
            out["ssl.certificate.pem"] = out.pop("ssl.keystore.certificate.chain")
        if "ssl.keystore.key" in out:
            out["ssl.key.pem"] = out.pop("ssl.keystore.key")
    if "ssl.keystore.location" not in out:
        if "ssl.keystore.password" in out and not inline:
            # The Java client refuses this too (DefaultSslEngineFactory).
            raise ConfigurationError(
                prefix + "ssl.keystore.password",
                REDACTED,
                "a keystore password only with its keystore",
                f"Set {prefix}ssl.keystore.location too, or remove the password.",
            )
        if out.pop("ssl.keystore.type", None) is not None:
            log.warning("%sssl.keystore.type: a keystore type without a keystore: no client "
                        "certificate is sent, as in the Java client.", prefix)  # fmt: skip
        return
    kind = _store_type(out.pop("ssl.keystore.type", None))
    if kind not in ("JKS", "PKCS12", "PEM"):
        raise ConfigurationError(
            prefix + "ssl.keystore.type",
            kind,
            "'JKS', 'PKCS12' or 'PEM'",
            f"As in Kafka's Java client; for PEM text set {prefix}ssl.keystore.certificate."
            f"chain and {prefix}ssl.keystore.key instead of a location.",
        )
    # Every store is read here, PKCS#12 too: librdkafka's OpenSSL 3 refuses the old PKCS#12
    # encryptions (RC2, 3DES) that the JVM reads, and executors then need no copy of the file.
    pem = _load(
        load_store, prefix + "ssl.keystore.location", prefix, out.pop("ssl.keystore.location"),
        kind, out.pop("ssl.keystore.password", None), "keystore", out.get("ssl.key.password"),
    )  # fmt: skip
    key = PRIVATE_KEY_PEM.search(pem)
    if key is None:  # the loader checked; a stub may not have
        raise ConfigurationError(
            prefix + "ssl.keystore.location", None, "a keystore holding a private key"
        )
    out["ssl.certificate.pem"] = pem[: key.start()].strip() + "\n"
    out["ssl.key.pem"] = key.group() + "\n"
    if kind != "PEM":
        out.pop("ssl.key.password", None)  # the key comes out of the store in clear


#: One PEM private key block, of any kind (PKCS#8, encrypted, RSA, EC).
PRIVATE_KEY_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z]+ )*)PRIVATE KEY-----.+?-----END \1PRIVATE KEY-----", re.DOTALL
)
