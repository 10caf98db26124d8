"""OAUTHBEARER: Kafka's login module as librdkafka's settings, and cloud tokens (the
``oauthProvider`` option, a Python function that gives tokens). Plain library (no Spark, no
Kafka client): runs where options are parsed (the driver) and where clients are created (the
driver and executors).

:func:`oauth_login` translates a Spark job's ``OAuthBearerLoginModule`` line: the options
Kafka's OIDC login reads (``clientId``, ``clientSecret``, ``scope``, ``extension_*``, and the
identity provider's ``ssl.*`` settings, handed to an injected function) become librdkafka's
client-credentials flow; Kafka's unsecured-token options become librdkafka's unsecured JWT.

Amazon MSK IAM, Microsoft Entra (Event Hubs) and other clouds sign in with tokens that only
their SDKs can make; librdkafka asks for each token through confluent-kafka's ``oauth_cb``. A
callback cannot travel in a client's settings (executors build their clients from settings
pickled on the driver), so the option names the function instead, ``module:function`` or
``module.function``, and each process imports it by that name (once per process, cached). The
function takes no argument and returns ``(token, expiry)``: the token, and when it expires in
Unix seconds; optionally a third item, the principal, and a fourth, SASL extensions (a dict).
librdkafka calls it again before the token expires (at 80% of its life).

The name travels in librdkafka's own ``sasl.oauthbearer.config`` (the text librdkafka hands to
the token callback), marked by :data:`MARKER`: :func:`oauth_callback` makes the callback from a
client's settings wherever one is created. :func:`with_provider` checks the option once, before
a query starts: the function must import, be callable and return a valid token.
"""

from __future__ import annotations

import base64
import importlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka_direct.config.jaas import JaasEntry, login_mechanism, need
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["MARKER", "OPTION", "IdpTrust", "TokenProvider", "check_token", "oauth_callback",
           "oauth_login", "provider_spec", "resolve", "with_provider"]  # fmt: skip

log = logging.getLogger(__name__)

#: The option (source, sink; ``kafkaParams`` key for the DStream API and the receiver stream).
OPTION = "oauthProvider"
#: How the function's name is written in ``sasl.oauthbearer.config``.
MARKER = "kafka_direct.oauthProvider="

#: ``() -> (token, expiry epoch seconds[, principal[, extensions]])``
TokenProvider = Callable[[], Any]

#: The latest expiry accepted, from now: one year. Further looks like milliseconds.
_MAX_LIFETIME_S = 366 * 24 * 3600.0
_SHAPE = "(token, expiry) with the expiry in Unix seconds, optionally then principal, extensions"

_lock = threading.Lock()
_resolved: dict[str, TokenProvider] = {}
_checked: set[str] = set()


def provider_spec(config: Mapping[str, str]) -> str | None:
    """The function's name in a client's settings, or None when it has none."""
    value = config.get("sasl.oauthbearer.config", "")
    return value[len(MARKER) :].strip() if value.startswith(MARKER) else None


def resolve(spec: str, option: str = OPTION) -> TokenProvider:
    """The function named ``spec`` (``package.module:function`` or ``package.module.function``),
    imported once per process."""
    with _lock:
        cached = _resolved.get(spec)
    if cached is not None:
        return cached
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ConfigurationError(
            option, spec, "'package.module:function' (or 'package.module.function')",
            "Name a function of an importable module, for example 'my_app.auth:msk_token'.",
        )  # fmt: skip
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except ImportError as exc:
        raise ConfigurationError(
            option, spec, "the name of a function this Python can import",
            f"Importing '{module_name}' failed ({type(exc).__name__}: {exc}). The module must be "
            "importable on the driver and on every executor (installed, or shipped with "
            "spark.submit.pyFiles / addPyFile).",
        ) from None  # fmt: skip
    except AttributeError:
        raise ConfigurationError(
            option, spec, "the name of a function this Python can import",
            f"Module '{module_name}' has no '{attr}'.",
        ) from None  # fmt: skip
    if not callable(target):
        raise ConfigurationError(
            option, spec, "a function (callable with no argument)",
            f"'{attr}' is a {type(target).__name__}.",
        )  # fmt: skip
    with _lock:
        _resolved[spec] = target
    return target  # type: ignore[no-any-return]


def _jwt_subject(token: str) -> str | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    sub = claims.get("sub") if isinstance(claims, dict) else None
    return sub if isinstance(sub, str) and sub else None


def check_token(
    got: object, spec: str, option: str = OPTION, now: float | None = None
) -> tuple[str, float, str, dict[str, str]]:
    """``got`` (what the function returned) as ``oauth_cb``'s ``(token, expiry, principal,
    extensions)``; a refusal names the option, the function and what was wrong, never the
    token. The principal defaults to the token's ``sub`` when it is a JWT."""
    now = time.time() if now is None else now

    def refuse(what: str, fix: str) -> ConfigurationError:
        return ConfigurationError(option, spec, f"a function that returns {_SHAPE}",
                                  f"It returned {what}. {fix}")  # fmt: skip

    if not isinstance(got, tuple | list) or not 2 <= len(got) <= 4:
        shown = f"a tuple of {len(got)}" if isinstance(got, tuple | list) else type(got).__name__
        raise refuse(shown, "Return (token, expiry_seconds).")
    token, expiry, *rest = got
    if not isinstance(token, str) or not token.strip():
        raise refuse(f"a token of type {type(token).__name__}" if not isinstance(token, str)
                     else "an empty token", "The token must be a non-empty string.")  # fmt: skip
    if isinstance(expiry, bool) or not isinstance(expiry, int | float) or math.isnan(expiry):
        raise refuse(f"an expiry of type {type(expiry).__name__}",
                     "The expiry is a number: Unix seconds.")  # fmt: skip
    if expiry > now + _MAX_LIFETIME_S:
        raise refuse(
            "an expiry more than a year away",
            "The expiry is in seconds; milliseconds (as MSKAuthTokenProvider gives) must be "
            "divided by 1000.",
        )
    if expiry <= now:
        raise refuse("a token that has already expired", "Return a fresh token.")
    principal = rest[0] if rest else None
    if principal is not None and (not isinstance(principal, str) or not principal.strip()):
        raise refuse("a principal that is not a non-empty string", "Return a name, or None.")
    extensions = rest[1] if len(rest) > 1 else None
    if extensions is not None and not (
        isinstance(extensions, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in extensions.items())
    ):
        raise refuse("extensions that are not a dict of strings", "Return a dict[str, str].")
    return (
        token,
        float(expiry),
        principal or _jwt_subject(token) or "kafka-direct",
        dict(extensions or {}),
    )


def with_provider(params: Mapping[str, str], spec: str, *, prefix: str = "kafka.",
                  option: str = OPTION) -> dict[str, str]:  # fmt: skip
    """``params`` (librdkafka names) with the function named ``spec`` as their token source.

    Checks, once per process and function: it imports, is callable, and returns a valid token
    now (so a broken provider fails before the query starts, not in every task). Refuses
    settings that would fight it (another token source, another SASL mechanism).
    """
    spec = spec.strip()
    if not spec:
        raise ConfigurationError(option, spec, "'package.module:function'")
    for key in ("sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.jaas.config",
                "enable.sasl.oauthbearer.unsecure.jwt"):  # fmt: skip
        if key in params and not (key == "sasl.oauthbearer.method" and params[key] == "default"):
            raise ConfigurationError(
                prefix + key, "<set>", f"not set next to '{option}'",
                f"'{option}' gives the tokens; remove {prefix}{key}, or remove '{option}'.",
            )  # fmt: skip
    current = params.get("sasl.oauthbearer.config")
    if current is not None and current != MARKER + spec:
        raise ConfigurationError(
            prefix + "sasl.oauthbearer.config", "<set>", f"not set next to '{option}'",
            f"'{option}' uses it to name the function; remove {prefix}sasl.oauthbearer.config.",
        )  # fmt: skip
    mechanism = params.get("sasl.mechanism") or params.get("sasl.mechanisms") or "OAUTHBEARER"
    if mechanism.strip().upper() != "OAUTHBEARER":  # Java trims its settings' values
        raise ConfigurationError(
            prefix + "sasl.mechanism", mechanism, f"'OAUTHBEARER' with '{option}'",
            f"A token function signs in with SASL OAUTHBEARER; set {prefix}sasl.mechanism to "
            "'OAUTHBEARER' (or leave it unset).",
        )  # fmt: skip
    with _lock:
        checked = spec in _checked
    if not checked:
        function = resolve(spec, option)
        try:
            got = function()
        except Exception as exc:  # noqa: BLE001 - any failure of user code, named
            raise ConfigurationError(
                option, spec, "a function that returns a token",
                f"Calling it raised {type(exc).__name__}; fix the function or its credentials "
                "(its own log says more).",
            ) from None  # fmt: skip
        check_token(got, spec, option)
        with _lock:
            _checked.add(spec)
    out = {k: v for k, v in params.items() if k != "sasl.mechanisms"}
    out["sasl.mechanism"] = "OAUTHBEARER"
    out["sasl.oauthbearer.config"] = MARKER + spec
    return out


def oauth_callback(config: Mapping[str, str]) -> Callable[[str], tuple[Any, ...]] | None:
    """confluent-kafka's ``oauth_cb`` for a client with these settings, or None when they name
    no function. It imports the function in this process (once) and checks each token; an
    error in it becomes librdkafka's token failure, which the client reports."""
    spec = provider_spec(config)
    if spec is None:
        return None

    def oauth_cb(_oauthbearer_config: str) -> tuple[Any, ...]:
        return check_token(resolve(spec)(), spec)

    return oauth_cb


# -- Kafka's OAuthBearerLoginModule ---------------------------------------------------------------

#: ``(the login module's ssl.* options, the option to name) -> https.ca.pem or None``: the
#: identity provider's trust, as :mod:`kafka_direct.config.security` reads a truststore.
IdpTrust = Callable[[Mapping[str, str], str], str | None]

#: The login module's options that Kafka's OIDC login reads (besides ``extension_*`` and the
#: identity provider's ``ssl.*``, Kafka's client TLS settings, read from the JAAS options).
_OIDC_OPTIONS = ("clientId", "clientSecret", "scope")


def oauth_login(
    params: Mapping[str, str], entry: JaasEntry, prefix: str, idp_trust: IdpTrust
) -> dict[str, str]:
    """librdkafka's settings for ``OAuthBearerLoginModule``: the client-credentials flow
    (``sasl.oauthbearer.method=oidc``), or an unsecured JWT for Kafka's unsecured options."""
    option = prefix + "sasl.jaas.config"
    out = {"sasl.mechanism": login_mechanism(params, ("OAUTHBEARER",), prefix, entry)}
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
    # Kafka's OIDC login trims these (JaasOptionsUtils.validateString).
    out.update(
        {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": need(entry, "clientId", prefix).strip(),
            "sasl.oauthbearer.client.secret": need(entry, "clientSecret", prefix).strip(),
        }
    )
    if entry.options.get("scope", "").strip():
        out["sasl.oauthbearer.scope"] = entry.options["scope"].strip()
    extensions = {k[len("extension_") :]: v for k, v in entry.options.items()
                  if k.startswith("extension_")}  # fmt: skip
    if extensions:
        out["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in extensions.items())
    tls = {k: v for k, v in entry.options.items() if k.startswith("ssl.")}
    if tls and endpoint.strip().lower().startswith("https:"):
        # Kafka's OIDC login builds the token request's TLS from these (JaasOptionsUtils).
        ca = idp_trust(tls, option)
        if ca is not None:
            out["https.ca.pem"] = ca
    ignored = sorted(
        k for k in entry.options
        if k not in _OIDC_OPTIONS and not k.startswith(("extension_", "ssl.", "unsecuredLogin"))
    )  # fmt: skip
    if ignored:
        log.warning(
            "%s: the login module's option(s) %s are not read by Kafka's OIDC login: "
            "ignored, as the Java client ignores them.",
            option,
            ", ".join(ignored),
        )
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
