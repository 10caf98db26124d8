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
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "KNOWN_OPTIONS",
    "ReadOptions",
    "RegistryAuth",
    "RegistryOptions",
    "WriteOptions",
    "move_credentials",
    "parse_read_options",
    "parse_registry",
    "parse_write_options",
    "shown_address",
    "split_address",
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
_ADDRESS = "schemaRegistryAddress"
#: Shown instead of the value of an option the function does not know (see _check_known).
_UNKNOWN = "<value not shown: not a known option>"
# What cannot travel in an HTTP header, or is not what the user meant to send: a line break
# (from open(path).read()), a tab, any other control character. A token also holds no space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_IN_TOKEN = re.compile(r"[\x00-\x20\x7f]")

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
    for key in options:
        if key in allowed:
            continue
        # The value of a key we do not know is never shown: a misspelt credential key may be
        # spelt in a way no rule of redaction.is_secret foresees, and the fix is the key's name.
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)
        raise ConfigurationError(
            key,
            _UNKNOWN,  # and ConfigurationError shows a secret key's value as REDACTED anyway
            f"one of the {function} options: {', '.join(allowed)}",
            f"Did you mean '{close[0]}'?"
            if close
            else "kafka_direct refuses options it would otherwise silently ignore.",
        )


def shown_address(address: str) -> str:
    """``address`` as it may appear in a message: whatever precedes its last '@' may be
    ``user:password``, however malformed the rest is (no scheme, a colon for ``://``)."""
    return "<redacted>@" + address.rsplit("@", 1)[1] if "@" in address else address


def split_address(address: object) -> tuple[str, str | None]:
    """The registry's URL without user info, and the ``user:password`` the URL held (unquoted),
    or None. Checked: an http(s) URL with a host name and a valid port."""
    if not isinstance(address, str) or not address.strip():
        raise ConfigurationError(
            _ADDRESS, address, "the Schema Registry's URL, e.g. 'http://localhost:8081'"
        )
    text = address.strip()
    expected = "an http:// or https:// URL with a host name, e.g. 'https://registry:8081'"
    fix = f"Give credentials in '{_USER_INFO}' rather than in the address." if "@" in text else None
    try:
        parsed = urllib.parse.urlsplit(text)
        _ = parsed.port  # raises ValueError for a port that is not 0-65535
    except ValueError:
        # Never the exception's text: it may quote the address, credentials and all.
        raise ConfigurationError(
            _ADDRESS, shown_address(text), f"{expected} and a port from 0 to 65535", fix
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError(_ADDRESS, shown_address(text), expected, fix)
    if parsed.username is None:
        return text, None
    user_info = (
        f"{urllib.parse.unquote(parsed.username)}:{urllib.parse.unquote(parsed.password or '')}"
    )
    # host[:port] as written (an IPv6 literal keeps its brackets)
    return parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]).geturl(), user_info


def move_credentials(address: str, options: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``address`` without its user info, and ``options`` with that ``user:password`` as the
    user-info option unless one is given: what :func:`parse_registry` would use, for a holder
    of the address whose ``repr`` may be shown (the source's options)."""
    url, user_info = split_address(address)
    moved = dict(options)
    if user_info is not None and not moved.get(_USER_INFO):
        moved[_USER_INFO] = user_info
    return url, moved


def parse_registry(address: str, options: Mapping[str, str]) -> RegistryOptions:
    """The registry's address and connection options; credentials in a URL move to ``auth``."""
    url, url_user_info = split_address(address)
    user_info = options.get(_USER_INFO)
    if url_user_info is not None:
        user_info = user_info or url_user_info
    if user_info is not None and _CONTROL.search(user_info):
        # Refused, not stripped: spaces around a password may be part of it, and a line break
        # sent along would only come back as a 401 that does not say why.
        raise ConfigurationError(
            _USER_INFO if options.get(_USER_INFO) else _ADDRESS,
            REDACTED,
            "'user:password' without a line break or other control character",
            "Strip the line break a file read leaves, e.g. open(path).read().strip().",
        )
    bearer = options.get(_BEARER)
    if bearer:
        # Stripped, not refused: a token read from a file ends with a line break, and a bearer
        # token (RFC 6750's b64token) holds no whitespace, so stripping cannot change a valid one.
        bearer = bearer.strip()
        if _NOT_IN_TOKEN.search(bearer):
            raise ConfigurationError(
                _BEARER,
                REDACTED,
                "one token, without spaces, line breaks or other control characters",
                "Pass the token alone, as the identity provider issued it.",
            )
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
        url=url.rstrip("/"),
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
