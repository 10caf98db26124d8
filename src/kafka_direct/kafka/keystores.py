"""Java key and trust stores read for librdkafka, with the JDK's ``keytool``. Runs in the
driver's processes, where options are parsed (:func:`load_store` is the store loader of
:mod:`kafka_direct.config.security`).

librdkafka reads PEM (and PKCS#12 keystores), never JKS. A truststore's certificates are listed
with ``keytool -list -rfc``; a JKS keystore is copied to PKCS#12 with ``keytool
-importkeystore`` and its key and chain written as PEM (``cryptography``). Spark needs a JDK
anyway, so ``keytool`` is at hand: ``$JAVA_HOME/bin/keytool``, else the first on the PATH.
Passwords reach ``keytool`` through its environment (``-storepass:env``), never its command
line, and never appear in an error. Results are cached per process by the store's path, size and
modification time, so a stream's writers, built twice per micro-batch, run ``keytool`` once.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
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
    args: list[str], password: str | None, what: str, path: str, key_password: str | None = None
) -> str:
    env = dict(os.environ)
    env[_PASSWORD_ENV] = password or ""
    env[_KEY_PASSWORD_ENV] = key_password or ""
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


def _certificates(path: str, kind: str, password: str | None) -> str:
    if kind == "PEM":
        text = Path(path).read_text(encoding="ascii", errors="replace")
    else:
        args = [_keytool("ca", path), "-list", "-rfc", "-keystore", path, "-storetype", kind]
        if password:
            args += ["-storepass:env", _PASSWORD_ENV]
        text = _run(args, password, "ca", path)
    certs = _PEM_CERT.findall(text)
    if not certs:
        raise ConfigurationError(
            "kafka.ssl.truststore.location", path, "a truststore holding certificates"
        )
    return "\n".join(certs) + "\n"


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


def _key_alias(path: str, kind: str, password: str | None) -> str:
    """The alias of the keystore's first private key entry (``keytool -list``)."""
    args = [_keytool("keystore", path), "-list", "-keystore", path, "-storetype", kind,
            "-storepass:env", _PASSWORD_ENV]  # fmt: skip
    for line in _run(args, password, "keystore", path).splitlines():
        alias, _, rest = line.partition(", ")
        if "PrivateKeyEntry" in rest:
            return alias
    raise ConfigurationError(
        "kafka.ssl.keystore.location", path, "a keystore holding a private key and its certificate"
    )


def _keystore(path: str, kind: str, password: str | None, key_password: str | None) -> str:
    if kind == "PEM":
        return _pem_keystore(path)
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigurationError(
            "kafka.ssl.keystore.type",
            kind,
            "'PKCS12' (librdkafka reads it), or a JKS keystore with 'cryptography' installed",
            "Convert it once: keytool -importkeystore -srckeystore KEYSTORE.jks "
            "-destkeystore KEYSTORE.p12 -deststoretype PKCS12, then set "
            "kafka.ssl.keystore.type 'PKCS12'; or pip install cryptography.",
        ) from None
    with tempfile.TemporaryDirectory(prefix="kafka-direct-keystore-") as tmp:
        p12 = os.path.join(tmp, "store.p12")
        args = [
            _keytool("keystore", path), "-importkeystore", "-noprompt",
            "-srckeystore", path, "-srcstoretype", kind, "-srcstorepass:env", _PASSWORD_ENV,
            "-destkeystore", p12, "-deststoretype", "PKCS12", "-deststorepass:env", _PASSWORD_ENV,
        ]  # fmt: skip
        if key_password and key_password != password:
            # Java opens the key with ssl.key.password; keytool takes a key password that
            # differs from the store's only for one named entry.
            args += ["-srcalias", _key_alias(path, kind, password),
                     "-srckeypass:env", _KEY_PASSWORD_ENV]  # fmt: skip
        _run(args, password, "keystore", path, key_password)
        data = Path(p12).read_bytes()
    key, cert, chain = pkcs12.load_key_and_certificates(
        data, password.encode() if password else None
    )
    if key is None or cert is None:
        raise ConfigurationError(
            "kafka.ssl.keystore.location",
            path,
            "a keystore holding a private key and its certificate",
        )
    pems = [c.public_bytes(serialization.Encoding.PEM).decode() for c in [cert, *(chain or [])]]
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return "".join(pems) + key_pem


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
