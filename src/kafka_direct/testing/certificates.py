"""Throwaway certificate authorities and certificates signed by them, for the TLS tests (the
test Schema Registry on loopback). Plain library: the user's test process. Needs the
``cryptography`` package (which confluent-kafka's Schema Registry extra installs).

A CA is a pair of PEM files (certificate, unencrypted key) in a folder the test owns; servers
and clients get certificates signed by it, a client optionally with a password-protected key
(for ``ssl.key.password``).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any, NamedTuple

from kafka_direct.errors import ConfigurationError

__all__ = [
    "CertificateAuthority",
    "write_ca",
    "write_ca_and_server_certificate",
    "write_client_certificate",
    "write_server_certificate",
]

_VALID_BEFORE = datetime.timedelta(hours=1)
_VALID_FOR = datetime.timedelta(days=2)


class CertificateAuthority(NamedTuple):
    """A test CA's certificate and (unencrypted) key, both PEM files."""

    certificate: Path
    key: Path


def _crypto() -> Any:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "tls",
            True,
            "the 'cryptography' package, which makes the test registry's certificates",
            "Install it with: pip install cryptography",
        ) from None
    from cryptography import x509

    return x509


def _name(common: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - _VALID_BEFORE, now + _VALID_FOR


def _write_key(path: Path, key: Any, password: str | None = None) -> None:
    from cryptography.hazmat.primitives import serialization

    encryption: Any = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    path.chmod(0o600)


def write_ca(
    folder: Path, common_name: str = "kafka_direct test CA", *, stem: str = "ca"
) -> CertificateAuthority:
    """Writes ``<stem>.pem`` and ``<stem>.key`` into ``folder``: a self-signed CA valid for two
    days."""
    x509 = _crypto()
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    start, end = _validity()
    key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    paths = CertificateAuthority(folder / f"{stem}.pem", folder / f"{stem}.key")
    paths.certificate.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(paths.key, key)
    return paths


def _issue(
    ca: CertificateAuthority,
    common_name: str,
    extensions: list[tuple[Any, bool]],
    folder: Path,
    stem: str,
    password: str | None,
) -> tuple[Path, Path]:
    x509 = _crypto()
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_cert = x509.load_pem_x509_certificate(ca.certificate.read_bytes())
    ca_key: Any = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    start, end = _validity()
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(ca_key, hashes.SHA256())
    paths = (folder / f"{stem}.pem", folder / f"{stem}.key")
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths[1], key, password)
    return paths


def write_server_certificate(
    folder: Path, ca: CertificateAuthority, host: str
) -> tuple[Path, Path]:
    """Writes ``server.pem`` and ``server.key`` (unencrypted): a certificate for ``host`` (an IP
    address or a name; ``localhost`` too) signed by ``ca``."""
    x509 = _crypto()
    try:
        names: list[Any] = [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        names = [x509.DNSName(host)]
    names.append(x509.DNSName("localhost"))
    return _issue(ca, host, [(x509.SubjectAlternativeName(names), False)], folder, "server", None)


def write_client_certificate(
    folder: Path,
    ca: CertificateAuthority,
    common_name: str = "kafka-direct-client",
    *,
    password: str | None = None,
    stem: str = "client",
) -> tuple[Path, Path]:
    """Writes ``<stem>.pem`` and ``<stem>.key``: a TLS client certificate for ``common_name``
    signed by ``ca``; the key is encrypted with ``password`` when one is given."""
    x509 = _crypto()
    from cryptography.x509.oid import ExtendedKeyUsageOID

    usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    return _issue(ca, common_name, [(usage, False)], folder, stem, password)


def write_ca_and_server_certificate(folder: Path, host: str) -> tuple[Path, Path, Path]:
    """Writes ``ca.pem`` (and its key ``ca.key``), ``server.pem`` and ``server.key`` into
    ``folder``: a CA valid for two days and a certificate for ``host`` signed by it. Returns the
    CA's, the server certificate's and its key's paths."""
    ca = write_ca(folder)
    cert, key = write_server_certificate(folder, ca, host)
    return ca.certificate, cert, key
