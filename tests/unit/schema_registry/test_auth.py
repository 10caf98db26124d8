"""Unit tests for the authentication pieces: the test registry's JWT minting, its Quarkus
properties and mutual-TLS front address, the registry client's hints after a refusal, and its
loading of a client certificate (real PEM files made by kafka_direct.testing.certificates; no
server)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.schema_registry.client import RegistryClient, auth_hint, tls_hint
from kafka_direct.schema_registry.options import RegistryAuth, parse_registry
from kafka_direct.testing.certificates import write_ca, write_client_certificate
from kafka_direct.testing.registry_config import quarkus_security_properties
from kafka_direct.testing.tls_front import socat_listen_address
from kafka_direct.testing.tokens import (
    TEST_AUDIENCE,
    TEST_ISSUER,
    TokenIssuer,
    b64url,
    signing_input,
    token_claims,
)

CERT = "confluent.schema.registry.ssl.certificate.location"
KEY = "confluent.schema.registry.ssl.key.location"
KEY_PASSWORD = "confluent.schema.registry.ssl.key.password"


def _decode(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


@pytest.mark.parametrize(
    ("lifetime_s", "issuer", "expected_exp"),
    [
        (600, TEST_ISSUER, 1_700_000_600),
        (0.9, TEST_ISSUER, 1_700_000_000),  # whole seconds, as JWT's NumericDate
        (-60, TEST_ISSUER, 1_699_999_940),  # already expired
        (60, "https://elsewhere", 1_700_000_060),
    ],
)
def test_token_claims(lifetime_s: float, issuer: str, expected_exp: int) -> None:
    claims = token_claims("svc", now=1_700_000_000.7, lifetime_s=lifetime_s, issuer=issuer)
    assert claims == {
        "iss": issuer,
        "aud": TEST_AUDIENCE,
        "sub": "svc",
        "preferred_username": "svc",
        "iat": 1_700_000_000,
        "exp": expected_exp,
    }


@pytest.mark.parametrize(
    ("data", "encoded"),
    [(b"", ""), (b"\xfb\xff", "-_8"), (b"abc", "YWJj"), (b"ab", "YWI")],
)
def test_b64url_has_no_padding_and_the_url_alphabet(data: bytes, encoded: str) -> None:
    assert b64url(data) == encoded


def test_signing_input_is_the_header_and_the_claims() -> None:
    header, claims = signing_input({"sub": "x"}).split(".")
    assert _decode(header) == {"alg": "RS256", "typ": "JWT"}
    assert _decode(claims) == {"sub": "x"}


def test_minted_tokens_verify_with_the_public_key_only() -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    issuer, other = TokenIssuer(), TokenIssuer()
    token = issuer.mint("svc", lifetime_s=30, now=1_700_000_000)
    header, claims, signature = token.split(".")
    assert _decode(claims)["exp"] == 1_700_000_030 and _decode(claims)["iss"] == TEST_ISSUER
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    message = f"{header}.{claims}".encode()
    for key, valid in ((issuer, True), (other, False)):
        public: Any = serialization.load_der_public_key(base64.b64decode(key.public_key_base64))
        try:
            public.verify(raw, message, padding.PKCS1v15(), hashes.SHA256())
            verified = True
        except InvalidSignature:
            verified = False
        assert verified is valid
    assert "BEGIN" not in repr(issuer) and token not in repr(issuer)


@pytest.mark.parametrize(
    ("auth", "names", "absent"),
    [
        (RegistryAuth(bearer_token="tok-5e1"), ["bearer.auth.token", "expired"], "tok-5e1"),
        (RegistryAuth(user_info="ann:pw-77"), ["basic.auth.user.info"], "pw-77"),
        (RegistryAuth(), ["No credentials", "basic.auth.user.info", "bearer.auth.token"], "ann"),
    ],
)
def test_auth_hint_names_the_option_never_the_secret(
    auth: RegistryAuth, names: list[str], absent: str
) -> None:
    hint = auth_hint(auth)
    assert all(name in hint for name in names) and absent not in hint


@pytest.mark.parametrize(
    ("error", "has_certificate", "expected"),
    [
        ("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert", False, "requires a TLS client"),
        ("[SSL: SSLV3_ALERT_HANDSHAKE_FAILURE] sslv3 alert", False, "requires a TLS client"),
        ("[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca", True, "refused the client"),
        ("[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert", True, "refused the client"),
        ("EOF occurred in violation of protocol (_ssl.c:2427)", False, "may require a TLS client"),
        ("[Errno 104] Connection reset by peer", True, "may refuse the client"),
        ("[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca", False, None),
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", False, None),
        ("[Errno 111] Connection refused", True, None),
    ],
)
def test_tls_hint(error: str, has_certificate: bool, expected: str | None) -> None:
    hint = tls_hint(error, has_certificate)
    if expected is None:
        assert hint is None
    else:
        assert hint is not None and expected in hint and CERT in hint


@pytest.fixture(scope="module")
def client_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("certs")
    ca = write_ca(folder)
    plain_cert, plain_key = write_client_certificate(folder, ca, stem="plain")
    locked_cert, locked_key = write_client_certificate(folder, ca, password="kp-31f", stem="locked")
    assert b"ENCRYPTED" in Path(locked_key).read_bytes()
    return {
        "ca": str(ca.certificate),
        "plain_cert": str(plain_cert),
        "plain_key": str(plain_key),
        "locked_cert": str(locked_cert),
        "locked_key": str(locked_key),
    }


def _client(files: dict[str, str], kind: str, password: str | None = None) -> RegistryClient:
    options = {
        "confluent.schema.registry.ssl.ca.location": files["ca"],
        CERT: files[f"{kind}_cert"],
        KEY: files[f"{kind}_key"],
    }
    if password is not None:
        options[KEY_PASSWORD] = password
    return RegistryClient(parse_registry("https://127.0.0.1:1", options))


@pytest.mark.parametrize(
    ("kind", "password", "refused_option"),
    [
        ("plain", None, None),
        ("locked", "kp-31f", None),
        ("locked", "wrong-8a0", KEY_PASSWORD),
        ("locked", None, KEY_PASSWORD),  # never a terminal prompt
        ("plain", "unused-1", None),  # an unencrypted key ignores a password
    ],
)
def test_client_certificate_loading(
    client_files: dict[str, str], kind: str, password: str | None, refused_option: str | None
) -> None:
    client = _client(client_files, kind, password)
    if refused_option is None:
        assert client._context() is not None
        return
    with pytest.raises(ConfigurationError) as refused:
        client._context()
    assert refused.value.option == refused_option
    assert "kp-31f" not in str(refused.value)
    if password:
        assert password not in str(refused.value) and "does not decrypt" in str(refused.value)


def test_a_key_that_is_not_the_certificates_names_the_certificate(
    client_files: dict[str, str],
) -> None:
    files = dict(client_files, plain_key=client_files["locked_key"])
    with pytest.raises(ConfigurationError, match="KEY_VALUES_MISMATCH") as refused:
        _client(files, "plain", "kp-31f")._context()
    # The password opens the key: the key is not the certificate's.
    assert refused.value.option == CERT and "kp-31f" not in str(refused.value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, []),
        (
            {"https_port": 8443, "certificate": "s.pem", "key": "s.key"},
            [
                "quarkus.http.ssl-port=8443",
                "quarkus.http.insecure-requests=disabled",
                "quarkus.http.ssl.certificate.files=s.pem",
                "quarkus.http.ssl.certificate.key-files=s.key",
            ],
        ),
        (
            {"users": {"ann": "pw-1"}},
            [
                "quarkus.http.auth.basic=true",
                "quarkus.security.users.embedded.enabled=true",
                "quarkus.security.users.embedded.plain-text=true",
                "quarkus.http.auth.permission.everything.paths=/*",
                "quarkus.http.auth.permission.everything.policy=authenticated",
                "quarkus.security.users.embedded.users.ann=pw-1",
            ],
        ),
        (
            {"oidc_public_key": "MIIB"},
            [
                "quarkus.oidc.tenant-enabled=true",
                "quarkus.oidc.application-type=service",
                "quarkus.oidc.public-key=MIIB",
                f"quarkus.oidc.token.issuer={TEST_ISSUER}",
                f"quarkus.oidc.token.audience={TEST_AUDIENCE}",
                'quarkus.log.category."io.quarkus.oidc".level=ERROR',
                'quarkus.log.category."io.quarkus.oidc.runtime.OidcProvider".level=ERROR',
                'quarkus.log.category."io.apicurio.registry.auth.AuthorizedInterceptor".level=OFF',
            ],
        ),
    ],
)
def test_quarkus_security_properties(kwargs: dict[str, Any], expected: list[str]) -> None:
    assert quarkus_security_properties(**kwargs) == expected


def test_tls_and_bearer_together() -> None:
    lines = quarkus_security_properties(
        https_port=1, certificate="c", key="k", oidc_public_key="MIIB"
    )
    assert lines[0] == "quarkus.http.ssl-port=1" and "quarkus.oidc.public-key=MIIB" in lines
    assert not any("embedded" in line for line in lines)


def test_socat_refuses_clients_without_a_certificate_from_the_ca() -> None:
    address = socat_listen_address("127.0.0.1", 9, Path("s.pem"), Path("s.key"), Path("ca.pem"))
    assert address == (
        "OPENSSL-LISTEN:9,bind=127.0.0.1,reuseaddr,fork,cert=s.pem,key=s.key,cafile=ca.pem,verify=1"
    )
