"""Java key and trust stores read for librdkafka, with the JDK's ``keytool``. Runs in the
driver's processes, where options are parsed (:func:`load_store` is the store loader of
:mod:`kafka_direct.config.security`).

librdkafka reads PEM, never JKS, and its OpenSSL 3 refuses the PKCS#12 encryptions of older
tools (RC2-40 and 3DES: ``openssl pkcs12 -export`` of OpenSSL 1.x, ``keytool`` before JDK 8u301)
that the JVM still reads. So every store is read here, as the JVM reads it, with ``keytool
-list -rfc`` (each entry's alias, type and certificates):

- a truststore trusts what Java's trust manager takes from a ``KeyStore``: each trusted
  certificate entry, and of each key entry its own certificate only (not the CA that issued
  it, which the JVM does not trust for being in that chain);
- a keystore gives its one key entry: that entry alone is copied (``keytool -importkeystore
  -srcalias``) to a PKCS#12 file of the JDK's own encryption, whose key ``cryptography`` writes
  as PEM, with the entry's certificate chain. A keystore holding several keys is refused,
  naming them: the JVM picks one per connection by the broker's request, which librdkafka
  cannot, having no alias setting.

Spark needs a JDK anyway, so ``keytool`` is at hand: ``$JAVA_HOME/bin/keytool``, else the first
on the PATH; it runs in English, whose words are parsed. Passwords reach ``keytool`` through its
environment (``-storepass:env``), never its command line, and never appear in an error. Results
are cached per process by the store's path, size and modification time, so a stream's writers,
built twice per micro-batch, run ``keytool`` once.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kafka_direct.config.security import PRIVATE_KEY_PEM
from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED

__all__ = ["load_store"]

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
_lock = threading.Lock()
_cache: dict[tuple[str, ...], str] = {}
_PASSWORD_ENV = "KAFKA_DIRECT_STOREPASS"
_KEY_PASSWORD_ENV = "KAFKA_DIRECT_KEYPASS"
#: The password of the temporary PKCS#12 copy of a keystore's key entry: keytool wants one of
#: six characters at least, whatever the user's store has.
_COPY_PASSWORD_ENV = "KAFKA_DIRECT_COPYPASS"
#: keytool's messages follow the JVM's locale; the words parsed here are English.
_ENGLISH = "-J-Duser.language=en"


def _option(what: str) -> str:
    return "kafka.ssl.truststore.location" if what == "ca" else "kafka.ssl.keystore.location"


def _keytool(what: str, path: str) -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home, "bin", "keytool") if java_home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("keytool")
    if found is None:
        raise ConfigurationError(
            _option(what),
            path,
            "a store the JDK's keytool can read (JKS or PKCS12)",
            "No keytool was found (neither $JAVA_HOME/bin/keytool nor on the PATH): install a "
            "JDK, or give the certificates as PEM (ssl.truststore.type 'PEM').",
        )
    return found


def _run(
    args: list[str], password: str | None, what: str, path: str, key_password: str | None = None,
    copy_password: str = "",
) -> str:  # fmt: skip
    env = dict(os.environ)
    env[_PASSWORD_ENV] = password or ""
    env[_KEY_PASSWORD_ENV] = key_password or ""
    env[_COPY_PASSWORD_ENV] = copy_password
    proc = subprocess.run(
        args, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        said = " ".join((proc.stdout + proc.stderr).split())[:300]
        for secret in (password, key_password):
            if secret:
                said = said.replace(secret, REDACTED)
        raise ConfigurationError(
            _option(what),
            path,
            "a store keytool can open with the password given (and, for a key whose password "
            "differs from the store's, kafka.ssl.key.password)",
            f"keytool said: {said}",
        )
    return proc.stdout


@dataclass(frozen=True)
class _Entry:
    """One entry of a Java store, as ``keytool -list -rfc`` shows it."""

    alias: str
    #: "PrivateKeyEntry", "trustedCertEntry" or "SecretKeyEntry".
    kind: str
    #: Its certificates, PEM: a key entry's chain (its own first), or the trusted certificate.
    certificates: tuple[str, ...]


def _entries(path: str, kind: str, password: str | None, what: str) -> list[_Entry]:
    """Every entry of the store (``keytool -list -rfc``)."""
    args = [_keytool(what, path), _ENGLISH, "-list", "-rfc", "-keystore", path,
            "-storetype", kind]  # fmt: skip
    if password:
        args += ["-storepass:env", _PASSWORD_ENV]
    text = _run(args, password, what, path)
    entries = []
    for block in re.split(r"^Alias name: ", text, flags=re.MULTILINE)[1:]:
        alias = block.split("\n", 1)[0].strip()
        entry_type = re.search(r"^Entry type: (\w+)", block, re.MULTILINE)
        certs = tuple(_PEM_CERT.findall(block))
        entries.append(_Entry(alias, entry_type.group(1) if entry_type else "", certs))
    return entries


def _certificates(path: str, kind: str, password: str | None) -> str:
    if kind == "PEM":
        certs = _PEM_CERT.findall(Path(path).read_text(encoding="ascii", errors="replace"))
    else:
        # What the JVM's trust manager takes from a KeyStore: trusted certificate entries, and
        # a key entry's own certificate (never the rest of its chain).
        certs = []
        for entry in _entries(path, kind, password, "ca"):
            if entry.kind == "trustedCertEntry":
                certs += entry.certificates
            elif entry.kind == "PrivateKeyEntry":
                certs += entry.certificates[:1]
    if not certs:
        raise ConfigurationError(
            "kafka.ssl.truststore.location",
            path,
            "a truststore holding certificates",
            "A PKCS12 store's certificates are encrypted: set kafka.ssl.truststore.password."
            if kind == "PKCS12" and not password
            else None,
        )
    return "\n".join(dict.fromkeys(certs)) + "\n"


def _pem_keystore(path: str) -> str:
    """A PEM keystore file (Kafka's ``ssl.keystore.type=PEM``): its certificate chain, then its
    private key as it is (encrypted or not: ``ssl.key.password`` opens it, as in Java)."""
    text = Path(path).read_text(encoding="ascii", errors="replace")
    certs = _PEM_CERT.findall(text)
    key = PRIVATE_KEY_PEM.search(text)
    if not certs or key is None:
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a PEM file holding a certificate chain and its private key",
        )
    return "\n".join(certs) + "\n" + key.group() + "\n"


def _key_entry(path: str, kind: str, password: str | None) -> _Entry:
    """The keystore's one key entry."""
    keys = [e for e in _entries(path, kind, password, "keystore") if e.kind == "PrivateKeyEntry"]
    if not keys:
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a keystore holding a private key and its certificate",
        )
    if len(keys) > 1:
        aliases = ", ".join(repr(e.alias) for e in keys)
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a keystore holding one private key",
            f"It holds {len(keys)} ({aliases}); the JVM picks one per connection, librdkafka "
            "takes one and has no alias setting. Copy the client's key to a store of its own: "
            "keytool -importkeystore -srckeystore KEYSTORE -srcalias ALIAS -destkeystore "
            "CLIENT.p12 -deststoretype PKCS12, and name that one.",
        )
    return keys[0]


def _keystore(path: str, kind: str, password: str | None, key_password: str | None) -> str:
    if kind == "PEM":
        return _pem_keystore(path)
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a keystore kafka_direct can read: JKS and PKCS12 need the package 'cryptography'",
            "pip install cryptography; or give the certificate chain and key as PEM "
            "(kafka.ssl.keystore.type 'PEM').",
        ) from None
    entry = _key_entry(path, kind, password)
    copy_password = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="kafka-direct-keystore-") as tmp:
        p12 = os.path.join(tmp, "store.p12")
        args = [
            _keytool("keystore", path), _ENGLISH, "-importkeystore", "-noprompt",
            "-srckeystore", path, "-srcstoretype", kind, "-srcstorepass:env", _PASSWORD_ENV,
            "-srcalias", entry.alias, "-destkeystore", p12, "-deststoretype", "PKCS12",
            "-deststorepass:env", _COPY_PASSWORD_ENV, "-destkeypass:env", _COPY_PASSWORD_ENV,
        ]  # fmt: skip
        # Java opens the key with ssl.key.password where it differs from the store's.
        args += ["-srckeypass:env", _KEY_PASSWORD_ENV if key_password else _PASSWORD_ENV]
        _run(args, password, "keystore", path, key_password, copy_password)
        data = Path(p12).read_bytes()
    key, _, _ = pkcs12.load_key_and_certificates(data, copy_password.encode())
    if key is None or not entry.certificates:
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a keystore holding a private key and its certificate",
        )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return "\n".join(entry.certificates) + "\n" + key_pem


def load_store(
    path: str, kind: str, password: str | None, what: str, key_password: str | None = None
) -> str:
    """PEM text of a store: its certificates (``what`` "ca"), or a keystore's chain then its
    private key (``what`` "keystore"; in clear, but for a PEM file's, which stays as it is)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ConfigurationError(
            _option(what),
            path,
            "a file this process can read",
            f"{exc.strerror}. As with Spark's Kafka connector, the store must be readable where "
            "the query is defined (the driver); kafka_direct then sends executors what they "
            "need inline.",
        ) from None
    secret = hashlib.sha256(f"{password or ''}\0{key_password or ''}".encode()).hexdigest()
    key = (path, kind, what, str(stat.st_size), str(stat.st_mtime_ns), secret)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    if what == "ca":
        pem = _certificates(path, kind, password)
    else:
        pem = _keystore(path, kind, password, key_password)
    with _lock:
        _cache[key] = pem
    return pem
