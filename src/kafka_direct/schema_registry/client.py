"""The Schema Registry's REST API (Confluent's, which Apicurio serves too). Runs in the driver
(planning: latest schema, registering) and in the Python workers (writer schemas by id).

Schemas are immutable once registered, so a schema fetched by id is cached for the life of the
Python worker: the registry is asked once per id per worker, never per record. Spark reuses
Python workers between tasks (``spark.python.worker.reuse``), so the cache outlives a task.
An id the registry does not have is remembered for :data:`MISSING_ID_TTL_S`: records written
with a deleted schema, or read against the wrong registry, then cost one request per id per
worker in that time, not one per record (PERMISSIVE mode reads on past them).

Plain ``urllib`` keeps the dependency list short; every request has a timeout, and every error
is mapped here, once, to :mod:`kafka_direct.schema_registry.errors` without credentials.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED
from kafka_direct.schema_registry.errors import SchemaNotFoundError, SchemaRegistryError
from kafka_direct.schema_registry.options import RegistryAuth, RegistryOptions

__all__ = [
    "MISSING_ID_TTL_S",
    "RegisteredSchema",
    "RegistryClient",
    "SchemaReference",
    "auth_hint",
    "cached_schema",
    "clear_cache",
    "tls_hint",
]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_PREFIX = "confluent.schema.registry."
_USER_INFO = _PREFIX + "basic.auth.user.info"
_BEARER = _PREFIX + "bearer.auth.token"
_CERT = _PREFIX + "ssl.certificate.location"
_KEY = _PREFIX + "ssl.key.location"
_KEY_PASSWORD = _PREFIX + "ssl.key.password"

_cache_lock = threading.Lock()
_schemas_by_id: dict[tuple[str, int], RegisteredSchema] = {}
#: How long an id the registry answered "not found" for is taken as still missing. Short, as
#: a registry restored from a backup or filled by a migration may gain it.
MISSING_ID_TTL_S = 30.0
_missing_by_id: dict[tuple[str, int], tuple[float, str]] = {}


@dataclass(frozen=True)
class SchemaReference:
    """One entry of a schema's ``references``: the type or file ``name`` is ``subject``'s
    ``version`` (see :mod:`.references`)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema: str
    schema_type: str = "AVRO"
    subject: str | None = None
    version: int | None = None
    references: tuple[SchemaReference, ...] = ()


def _references(answer: Any) -> tuple[SchemaReference, ...]:
    """The ``references`` of a registry answer (absent when the schema has none)."""
    return tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in answer.get("references") or ()
    )


def clear_cache() -> None:
    """Forget every cached schema (for tests)."""
    with _cache_lock:
        _schemas_by_id.clear()
        _missing_by_id.clear()


def cached_schema(url: str, schema_id: int) -> RegisteredSchema | None:
    with _cache_lock:
        return _schemas_by_id.get((url, schema_id))


class RegistryClient:
    """One registry's API. Cheap to build; holds no connection between requests."""

    def __init__(self, options: RegistryOptions) -> None:
        self.options = options
        self._ssl: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"RegistryClient(url={self.options.url!r}, auth={self.options.auth!r})"

    def _context(self) -> ssl.SSLContext | None:
        if not self.options.url.startswith("https:"):
            return None
        if self._ssl is None:
            try:
                context = ssl.create_default_context(cafile=self.options.ca_location)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    _PREFIX + "ssl.ca.location",
                    self.options.ca_location,
                    f"a readable PEM file of CA certificates for TLS to the Schema Registry "
                    f"({exc})",
                    "Check the path on every Spark worker.",
                ) from None
            if self.options.certificate_location:
                self._load_client_certificate(context)
            self._ssl = context
        return self._ssl

    def _load_client_certificate(self, context: ssl.SSLContext) -> None:
        """The client certificate and its key; a key password that does not open the key is
        reported as such (never shown), and an encrypted key without one never prompts."""
        options = self.options
        password = options.auth.key_password

        def no_prompt() -> str:
            # Without a password OpenSSL would ask on the terminal; a Spark worker has none.
            raise ConfigurationError(
                _KEY_PASSWORD,
                None,
                f"the password of the encrypted private key in {_KEY}",
                f"Set {_KEY_PASSWORD}.",
            )

        try:
            context.load_cert_chain(
                str(options.certificate_location),
                options.key_location,
                password if password is not None else no_prompt,
            )
        except (OSError, ssl.SSLError) as exc:
            if (
                password is not None
                and getattr(exc, "reason", None) != "KEY_VALUES_MISMATCH"
                and _pem_has(options.key_location, b"ENCRYPTED")
                and _pem_has(options.certificate_location, b"BEGIN CERTIFICATE")
            ):
                raise ConfigurationError(
                    _KEY_PASSWORD,
                    REDACTED,
                    f"the password of the encrypted private key in {_KEY} "
                    f"({options.key_location}); it does not decrypt the key",
                    "Check the password.",
                ) from None
            raise ConfigurationError(
                _CERT,
                options.certificate_location,
                f"a PEM client certificate, with its unencrypted (or {_KEY_PASSWORD}-protected) "
                f"key in {_KEY} ({options.key_location}), for TLS to the Schema Registry "
                f"({exc})",
                "Check both paths on every Spark worker, and that the key belongs to the "
                "certificate.",
            ) from None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
        auth = self.options.auth
        if auth.user_info:
            token = base64.b64encode(auth.user_info.encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        elif auth.bearer_token:
            headers["Authorization"] = f"Bearer {auth.bearer_token}"
        return headers

    def request(self, method: str, path: str, body: Any = None, what: str = "") -> Any:
        """The JSON answer of ``method path``; registry errors mapped, credentials never shown."""
        url = self.options.url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=self._headers())
        # Outside the try: a bad TLS file is a ConfigurationError (a ValueError), not a
        # transport failure.
        context = self._context()
        where = f"{self.options.url} ({method} {path}{', ' + what if what else ''})"
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=context), _CredentialsStayHome()
        )
        try:
            with opener.open(request, timeout=self.options.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, method, path, what) from None
        except OSError as exc:  # the transport's: a socket or TLS error, not our request
            hint = (
                tls_hint(str(exc), self.options.certificate_location is not None)
                if self.options.url.startswith("https:")
                else None
            )
            raise SchemaRegistryError(
                f"Could not reach the Schema Registry at {where}: {exc}. "
                + (
                    hint
                    or "Check schemaRegistryAddress and that the registry is running and "
                    "reachable from every Spark worker."
                )
            ) from None
        except ValueError:
            # http.client refused to build the request. Never the exception's text: it quotes
            # the offending header, and that is the Authorization header with its credentials.
            raise SchemaRegistryError(
                f"Could not send a request to the Schema Registry at {where}: a header or the "
                "address is not valid in HTTP. Check schemaRegistryAddress, and that "
                f"'{_USER_INFO}' or '{_BEARER}' holds only the credential (no line break, no "
                "character outside Latin-1)."
            ) from None
        try:
            return json.loads(raw or b"null")
        except ValueError:
            raise SchemaRegistryError(
                f"The Schema Registry at {where} answered with something that is not JSON. "
                "Check that schemaRegistryAddress is the registry's URL, not another service's."
            ) from None

    def _http_error(
        self, exc: urllib.error.HTTPError, method: str, path: str, what: str
    ) -> SchemaRegistryError:
        try:
            detail = json.loads(exc.read() or b"{}")
        except ValueError:
            detail = {}
        code = detail.get("error_code") if isinstance(detail, dict) else None
        message = detail.get("message") if isinstance(detail, dict) else None
        where = f"{method} {path} on {self.options.url}"
        if exc.code in (401, 403):
            return SchemaRegistryError(
                f"The Schema Registry refused {where} with HTTP {exc.code}"
                f"{': ' + str(message).rstrip('.') if message else ''}. "
                f"{auth_hint(self.options.auth)}"
            )
        if exc.code == 404 or code in (40401, 40402, 40403):
            return SchemaNotFoundError(
                f"The Schema Registry has no {what or 'such schema'} ({where}: "
                f"{message or 'not found'})."
            )
        return SchemaRegistryError(
            f"The Schema Registry answered {where} with HTTP {exc.code}"
            f"{' (error ' + str(code) + ')' if code else ''}: {message or exc.reason}."
        )

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        """The schema with this id, from the worker's cache or (once) from the registry."""
        key = (self.options.url, schema_id)
        now = time.monotonic()
        with _cache_lock:
            found = _schemas_by_id.get(key)
            missing = _missing_by_id.get(key)
        if found is not None:
            return found
        if missing is not None and now < missing[0]:
            raise SchemaNotFoundError(missing[1])
        try:
            answer = self.request(
                "GET", f"/schemas/ids/{schema_id}", what=f"schema with id {schema_id}"
            )
        except SchemaNotFoundError as exc:
            with _cache_lock:
                _missing_by_id[key] = (now + MISSING_ID_TTL_S, str(exc))
            raise
        schema = RegisteredSchema(
            schema_id,
            str(answer["schema"]),
            str(answer.get("schemaType") or "AVRO"),
            references=_references(answer),
        )
        with _cache_lock:
            _schemas_by_id[key] = schema
        return schema

    def subject_version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """A subject's schema at ``version`` (a number or ``"latest"``)."""
        quoted = urllib.parse.quote(subject, safe="")
        answer = self.request(
            "GET",
            f"/subjects/{quoted}/versions/{version}",
            what=f"version {version} of subject '{subject}'",
        )
        return RegisteredSchema(
            int(answer["id"]),
            str(answer["schema"]),
            str(answer.get("schemaType") or "AVRO"),
            subject,
            int(answer["version"]),
            _references(answer),
        )

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` (a no-op if it is there) and return its id."""
        quoted = urllib.parse.quote(subject, safe="")
        body = _schema_body(schema, schema_type)
        answer = self.request(
            "POST", f"/subjects/{quoted}/versions", body, what=f"subject '{subject}'"
        )
        return int(answer["id"])

    def lookup(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """The id of ``schema`` if it is registered under ``subject``; else SchemaNotFoundError."""
        quoted = urllib.parse.quote(subject, safe="")
        body = _schema_body(schema, schema_type)
        answer = self.request(
            "POST", f"/subjects/{quoted}", body, what=f"this schema under subject '{subject}'"
        )
        return int(answer["id"])


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """Follows a redirect as urllib does, but sends the credentials only to the origin they
    were given for: urllib copies every header to the new URL, so a registry (or whatever
    answers at its address) that redirects to another host, or from https to http, would
    otherwise receive the Authorization header there, in clear text in the second case."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def auth_hint(auth: RegistryAuth) -> str:
    """What to check after a 401/403, by the credential that was sent (never its value)."""
    if auth.bearer_token:
        return (
            f"The bearer token in '{_BEARER}' was refused: it may have expired, or be for "
            "another issuer or audience, or not be signed by a key the registry trusts. "
            "Get a fresh token."
        )
    if auth.user_info:
        return f"Check the user and password in '{_USER_INFO}'."
    return (
        f"No credentials were sent: set '{_USER_INFO}' (user:password) or '{_BEARER}' (a "
        "token) in the options."
    )


# OpenSSL's alert names as Python's ssl module shows them, for what the server said about our
# client certificate.
_NO_CERTIFICATE_ALERTS = ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE")
_REFUSED_CERTIFICATE_ALERTS = (
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED",
    "CERTIFICATE_REVOKED",
    "ACCESS_DENIED",
)


# A TLS 1.3 server refuses a client certificate after the client has sent its request, so the
# client may see the connection closed instead of the server's alert.
_CLOSED = ("EOF occurred in violation of protocol", "UNEXPECTED_EOF", "Connection reset by peer")


def tls_hint(error: str, has_certificate: bool) -> str | None:
    """What to set when an https registry refused the TLS handshake over our client
    certificate (``error`` is the transport error's text), or None for any other failure."""
    alerts = _REFUSED_CERTIFICATE_ALERTS if has_certificate else _NO_CERTIFICATE_ALERTS
    if any(f"ALERT_{alert}" in error for alert in alerts):
        certain = True
    elif any(closed in error for closed in _CLOSED):
        certain = False
    else:
        return None
    if not has_certificate:
        return (
            f"The registry {'requires' if certain else 'closed the TLS connection; it may require'}"
            " a TLS client certificate (mutual TLS): set "
            f"'{_CERT}' and '{_KEY}' (and '{_KEY_PASSWORD}' for an encrypted key)."
        )
    return (
        f"The registry {'refused' if certain else 'closed the TLS connection; it may refuse'} "
        f"the client certificate in '{_CERT}': it must be signed by a CA the registry trusts "
        "for clients, and be valid now."
    )


def _pem_has(path: str | None, marker: bytes) -> bool:
    """Whether a PEM file starts with ``marker`` in its first lines: ``ENCRYPTED`` for a
    password-protected key (PKCS#8 or OpenSSL's legacy), ``BEGIN CERTIFICATE`` for a
    certificate. Tells a wrong key password from a bad file, which OpenSSL reports alike."""
    try:
        with open(str(path), "rb") as pem:
            head = pem.read(4096)
    except OSError:
        return False
    return marker in head


def _schema_body(schema: str, schema_type: str) -> dict[str, Any]:
    """The request body that registers or looks up ``schema``: the API's default type is Avro,
    so only another type is named."""
    body: dict[str, Any] = {"schema": schema}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    return body
