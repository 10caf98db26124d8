"""Signed JSON Web Tokens for the bearer-token tests of the test Schema Registry. Plain library:
the user's test process.

The test registry (Apicurio's Quarkus OIDC) verifies bearer tokens locally against a configured
RSA public key, as a service behind any OAuth 2.0 issuer does with the issuer's keys: signature
(RS256), expiry, issuer and audience. :class:`TokenIssuer` holds the RSA key pair and mints such
tokens; the claims and the encoding are pure functions here, the signature needs the
``cryptography`` package.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = [
    "TEST_AUDIENCE",
    "TEST_ISSUER",
    "TokenIssuer",
    "b64url",
    "signing_input",
    "token_claims",
]

#: The ``iss`` and ``aud`` the test registry accepts.
TEST_ISSUER = "https://issuer.kafka-direct.test"
TEST_AUDIENCE = "kafka-direct-registry"
_HEADER = {"alg": "RS256", "typ": "JWT"}


def b64url(data: bytes) -> str:
    """Base64url without padding, as JWS (RFC 7515) encodes every part."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def token_claims(
    subject: str,
    *,
    now: float,
    lifetime_s: float,
    issuer: str = TEST_ISSUER,
    audience: str = TEST_AUDIENCE,
) -> dict[str, Any]:
    """The claims of an access token issued at ``now`` (Unix seconds) for ``lifetime_s``
    seconds; a negative lifetime makes a token that has already expired."""
    issued = int(now)
    return {
        "iss": issuer,
        "aud": audience,
        "sub": subject,
        # Quarkus names the principal after this claim, and Apicurio logs that name.
        "preferred_username": subject,
        "iat": issued,
        "exp": issued + int(lifetime_s),
    }


def signing_input(claims: Mapping[str, Any], header: Mapping[str, Any] = _HEADER) -> str:
    """``base64url(header) . base64url(claims)``, the bytes a JWS signature covers."""
    parts = (dict(header), dict(claims))
    return ".".join(b64url(json.dumps(part, separators=(",", ":")).encode()) for part in parts)


class TokenIssuer:
    """An RSA key pair that signs RS256 access tokens; ``public_key_base64`` is what the
    registry is configured to verify them with. ``repr`` never shows a key or a token."""

    def __init__(self, key_size: int = 2048) -> None:
        try:
            from cryptography.hazmat.primitives.asymmetric import rsa
        except ImportError:
            raise ConfigurationError(
                "bearer",
                True,
                "the 'cryptography' package, which signs the test registry's tokens",
                "Install it with: pip install cryptography",
            ) from None
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)

    @property
    def public_key_base64(self) -> str:
        """The public key as base64 DER (SubjectPublicKeyInfo), for ``quarkus.oidc.public-key``."""
        from cryptography.hazmat.primitives import serialization

        der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(der).decode("ascii")

    def public_jwk(self, kid: str) -> dict[str, str]:
        """The public key as a JSON Web Key (RFC 7517) named ``kid``, for a JWKS endpoint."""
        numbers = self._key.public_key().public_numbers()

        def unsigned(value: int) -> str:
            return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                "n": unsigned(numbers.n), "e": unsigned(numbers.e)}  # fmt: skip

    def sign(self, claims: Mapping[str, Any], *, kid: str | None = None) -> str:
        """A compact JWS (``header.claims.signature``) of ``claims``, signed RS256; ``kid``
        names the key in the header, as a verifier with a JWKS looks it up."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        message = signing_input(claims, _HEADER if kid is None else {**_HEADER, "kid": kid})
        signature = self._key.sign(message.encode("ascii"), padding.PKCS1v15(), hashes.SHA256())
        return f"{message}.{b64url(signature)}"

    def mint(
        self,
        subject: str = "kafka-direct-test",
        *,
        lifetime_s: float = 600.0,
        issuer: str = TEST_ISSUER,
        audience: str = TEST_AUDIENCE,
        now: float | None = None,
    ) -> str:
        """A signed access token for ``subject``, valid for ``lifetime_s`` seconds from now."""
        claims = token_claims(
            subject,
            now=time.time() if now is None else now,
            lifetime_s=lifetime_s,
            issuer=issuer,
            audience=audience,
        )
        return self.sign(claims)

    def __repr__(self) -> str:
        return f"TokenIssuer(RS256, iss={TEST_ISSUER!r})"
