"""The options of ``from_avro`` / ``to_avro`` with a Schema Registry, parsed and validated once
on the driver. Pure: no I/O; the result is pickled into the Python workers' UDFs.

Option names follow Databricks' ``from_avro`` where it has one (``mode``,
``confluent.schema.registry.basic.auth.user.info``), and confluent-kafka's
``SchemaRegistryClient`` for TLS (``...ssl.ca.location``). Credentials are kept in
:class:`RegistryAuth`, whose ``repr`` never shows them, and a URL's ``user:password@`` part is
moved into it, so no error or log line can carry a secret.
"""

from __future__ import annotations

import difflib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kafka_direct.config.kafka import REDACTED, is_secret
from kafka_direct.errors import ConfigurationError

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "KNOWN_OPTIONS",
    "ReadOptions",
    "RegistryAuth",
    "RegistryOptions",
    "WriteOptions",
    "parse_read_options",
    "parse_registry",
    "parse_write_options",
]

DEFAULT_TIMEOUT_MS = 30_000
_PREFIX = "confluent.schema.registry."
_USER_INFO = _PREFIX + "basic.auth.user.info"
_CREDENTIALS_SOURCE = _PREFIX + "basic.auth.credentials.source"
_BEARER = _PREFIX + "bearer.auth.token"
_CA = _PREFIX + "ssl.ca.location"
_CERT = _PREFIX + "ssl.certificate.location"
_KEY = _PREFIX + "ssl.key.location"
_KEY_PASSWORD = _PREFIX + "ssl.key.password"
_TIMEOUT = _PREFIX + "timeout.ms"
_SECRETS = (_USER_INFO, _BEARER, _KEY_PASSWORD)

_REGISTRY_OPTIONS = (
    _USER_INFO,
    _CREDENTIALS_SOURCE,
    _BEARER,
    _CA,
    _CERT,
    _KEY,
    _KEY_PASSWORD,
    _TIMEOUT,
)
_READ_OPTIONS = ("mode", "schemaVersion")
_WRITE_OPTIONS = ("subjectNameStrategy", "topic", "isKey", "autoRegisterSchemas")
KNOWN_OPTIONS = (*_REGISTRY_OPTIONS, *_READ_OPTIONS, *_WRITE_OPTIONS)


@dataclass(frozen=True)
class RegistryAuth:
    """Credentials for the registry; ``repr`` shows only which kind is set."""

    user_info: str | None = None
    bearer_token: str | None = None
    key_password: str | None = None

    def __repr__(self) -> str:
        kinds = [
            name
            for name, value in (
                ("basic", self.user_info),
                ("bearer", self.bearer_token),
                ("key_password", self.key_password),
            )
            if value
        ]
        return f"RegistryAuth({', '.join(f'{k}={REDACTED}' for k in kinds) or 'none'})"

    __str__ = __repr__


@dataclass(frozen=True)
class RegistryOptions:
    """Where the registry is and how to reach it. ``url`` never holds credentials."""

    url: str
    auth: RegistryAuth = field(default_factory=RegistryAuth)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_MS / 1000


@dataclass(frozen=True)
class ReadOptions:
    mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST"
    schema_version: int | None = None


@dataclass(frozen=True)
class WriteOptions:
    subject_name_strategy: str = "topic"
    topic: str | None = None
    is_key: bool = False
    auto_register: bool = True


def _check_known(options: Mapping[str, str], allowed: tuple[str, ...], function: str) -> None:
    for key, value in options.items():
        if key in allowed:
            continue
        shown = REDACTED if key in _SECRETS or is_secret(key) or "user.info" in key else value
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)
        raise ConfigurationError(
            key,
            shown,
            f"one of the {function} options: {', '.join(allowed)}",
            f"Did you mean '{close[0]}'?"
            if close
            else "kafka_direct refuses options it would otherwise silently ignore.",
        )


def parse_registry(address: str, options: Mapping[str, str]) -> RegistryOptions:
    """The registry's address and connection options; credentials in a URL move to ``auth``."""
    if not isinstance(address, str) or not address.strip():
        raise ConfigurationError(
            "schemaRegistryAddress",
            address,
            "the Schema Registry's URL, e.g. 'http://localhost:8081'",
        )
    parsed = urllib.parse.urlsplit(address.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        shown = (
            parsed._replace(netloc=parsed.hostname or "").geturl() if parsed.password else address
        )
        raise ConfigurationError(
            "schemaRegistryAddress", shown, "an http:// or https:// URL with a host name"
        )
    user_info = options.get(_USER_INFO)
    if parsed.username is not None:
        user_info = user_info or (
            f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
        )
        netloc = parsed.hostname + (f":{parsed.port}" if parsed.port else "")
        parsed = parsed._replace(netloc=netloc)
    source = options.get(_CREDENTIALS_SOURCE, "USER_INFO")
    if source.upper() not in ("USER_INFO", "URL"):
        raise ConfigurationError(
            _CREDENTIALS_SOURCE,
            source,
            "'USER_INFO' or 'URL'",
            f"Put 'user:password' in {_USER_INFO}.",
        )
    if user_info is not None and ":" not in user_info:
        raise ConfigurationError(
            _USER_INFO, REDACTED, "'user:password'", "Separate the user and the password by ':'."
        )
    bearer = options.get(_BEARER)
    if user_info and bearer:
        raise ConfigurationError(
            _BEARER, REDACTED, f"not to be set together with {_USER_INFO}", "Choose one."
        )
    timeout = options.get(_TIMEOUT, str(DEFAULT_TIMEOUT_MS))
    try:
        timeout_ms = int(timeout)
        if timeout_ms <= 0:
            raise ValueError
    except ValueError:
        raise ConfigurationError(_TIMEOUT, timeout, "a positive number of milliseconds") from None
    if (options.get(_CERT) is None) != (options.get(_KEY) is None):
        raise ConfigurationError(
            _KEY if options.get(_CERT) else _CERT,
            None,
            f"both {_CERT} and {_KEY} for TLS client authentication",
        )
    return RegistryOptions(
        url=parsed.geturl().rstrip("/"),
        auth=RegistryAuth(user_info, bearer, options.get(_KEY_PASSWORD)),
        ca_location=options.get(_CA),
        certificate_location=options.get(_CERT),
        key_location=options.get(_KEY),
        timeout_s=timeout_ms / 1000,
    )


def _registry_part(options: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in options.items() if k in _REGISTRY_OPTIONS}


def parse_read_options(options: Mapping[str, str], function: str = "from_avro") -> ReadOptions:
    _check_known(options, (*_REGISTRY_OPTIONS, *_READ_OPTIONS), function)
    mode = str(options.get("mode", "FAILFAST")).upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise ConfigurationError(
            "mode",
            options.get("mode"),
            "'FAILFAST' or 'PERMISSIVE'",
            "FAILFAST fails the query on a bad record; PERMISSIVE returns null for it.",
        )
    version = options.get("schemaVersion")
    parsed_version: int | None = None
    if version is not None and str(version).lower() != "latest":
        try:
            parsed_version = int(version)
            if parsed_version <= 0:
                raise ValueError
        except ValueError:
            raise ConfigurationError(
                "schemaVersion", version, "a positive version number of the subject, or 'latest'"
            ) from None
    return ReadOptions(
        mode="PERMISSIVE" if mode == "PERMISSIVE" else "FAILFAST", schema_version=parsed_version
    )


def parse_write_options(options: Mapping[str, str], function: str = "to_avro") -> WriteOptions:
    _check_known(options, (*_REGISTRY_OPTIONS, *_WRITE_OPTIONS), function)
    flags = {}
    for name, default in (("isKey", False), ("autoRegisterSchemas", True)):
        raw = str(options.get(name, default)).lower()
        if raw not in ("true", "false"):
            raise ConfigurationError(name, options.get(name), "'true' or 'false'")
        flags[name] = raw == "true"
    return WriteOptions(
        subject_name_strategy=options.get("subjectNameStrategy", "topic"),
        topic=options.get("topic"),
        is_key=flags["isKey"],
        auto_register=flags["autoRegisterSchemas"],
    )


def registry_options_of(options: Mapping[str, str]) -> dict[str, str]:
    """The connection part of a function's options."""
    return _registry_part(options)
