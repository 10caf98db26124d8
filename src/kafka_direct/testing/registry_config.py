"""The Quarkus properties that secure the test Schema Registry (Apicurio Registry 3). Pure: no
I/O; :class:`kafka_direct.testing.schema_registry.SchemaRegistry` (the user's test process)
writes them to the ``config/application.properties`` of the registry's working directory, so
that no secret is on the JVM's command line.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka_direct.testing.tokens import TEST_AUDIENCE, TEST_ISSUER

__all__ = ["quarkus_security_properties"]


def quarkus_security_properties(
    *,
    https_port: int | None = None,
    certificate: str | None = None,
    key: str | None = None,
    users: Mapping[str, str] | None = None,
    oidc_public_key: str | None = None,
) -> list[str]:
    """``key=value`` lines: HTTPS only on ``https_port`` with the PEM ``certificate`` and
    ``key``; HTTP basic auth for ``users`` (Quarkus' embedded realm, every path for
    authenticated users only); bearer tokens verified with ``oidc_public_key`` (base64 DER), for
    :data:`~kafka_direct.testing.tokens.TEST_ISSUER` and ``TEST_AUDIENCE``, with no OIDC
    server."""
    lines: list[str] = []
    if https_port is not None:
        lines += [
            f"quarkus.http.ssl-port={https_port}",
            "quarkus.http.insecure-requests=disabled",
            f"quarkus.http.ssl.certificate.files={certificate}",
            f"quarkus.http.ssl.certificate.key-files={key}",
        ]
    if users:
        lines += [
            # Logged at start as "build time fixed", yet read: without it, nothing
            # authenticates and every request is refused with 401.
            "quarkus.http.auth.basic=true",
            "quarkus.security.users.embedded.enabled=true",
            "quarkus.security.users.embedded.plain-text=true",
            "quarkus.http.auth.permission.everything.paths=/*",
            "quarkus.http.auth.permission.everything.policy=authenticated",
        ]
        lines += [f"quarkus.security.users.embedded.users.{u}={p}" for u, p in users.items()]
    if oidc_public_key is not None:
        lines += [
            # Apicurio's OIDC mechanism is built in but off; with a public key and no
            # auth-server-url, Quarkus verifies tokens locally and contacts no server.
            "quarkus.oidc.tenant-enabled=true",
            "quarkus.oidc.application-type=service",
            f"quarkus.oidc.public-key={oidc_public_key}",
            f"quarkus.oidc.token.issuer={TEST_ISSUER}",
            f"quarkus.oidc.token.audience={TEST_AUDIENCE}",
            # A token whose signature fails is logged whole: by Quarkus at WARN (Apicurio even
            # sets DEBUG) and in the stack trace Apicurio's interceptor logs at ERROR.
            'quarkus.log.category."io.quarkus.oidc".level=ERROR',
            'quarkus.log.category."io.quarkus.oidc.runtime.OidcProvider".level=ERROR',
            'quarkus.log.category."io.apicurio.registry.auth.AuthorizedInterceptor".level=OFF',
        ]
    return lines
