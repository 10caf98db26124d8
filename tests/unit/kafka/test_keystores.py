"""Java stores read for librdkafka with the JDK's real keytool (kafka_direct.kafka.keystores):
a JKS and a PKCS#12 truststore, a JKS keystore, a PEM file, and the refusals. No broker."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.kafka.keystores import load_store

PW = "st0re-s3cr3t"


def _keytool() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "keytool").exists():
        return str(Path(java_home, "bin", "keytool"))
    found = shutil.which("keytool")
    if found is None:  # Spark needs a JDK: scripts/setup.sh installs one; a missing one fails
        pytest.fail("no keytool: the JDK that Spark needs is not set up", pytrace=False)
    return found


def _kt(*args: str) -> str:
    env = dict(os.environ, PW=PW)
    out = subprocess.run([_keytool(), *args], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("stores")
    ks = d / "client.jks"
    _kt("-genkeypair", "-alias", "client", "-keyalg", "RSA", "-keysize", "2048",
        "-dname", "CN=client", "-validity", "2", "-keystore", str(ks), "-storetype", "JKS",
        "-storepass:env", "PW", "-keypass:env", "PW")  # fmt: skip
    cert = d / "client.pem"
    _kt("-exportcert", "-rfc", "-alias", "client", "-keystore", str(ks),
        "-storepass:env", "PW", "-file", str(cert))  # fmt: skip
    out = {"keystore": ks, "cert": cert}
    for kind in ("JKS", "PKCS12"):
        ts = d / f"trust.{kind.lower()}"
        _kt("-importcert", "-noprompt", "-alias", "ca", "-file", str(cert), "-keystore", str(ts),
            "-storetype", kind, "-storepass:env", "PW")  # fmt: skip
        out[kind] = ts
    return out


def _body(pem: str) -> str:
    return "".join(pem.split())


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_a_truststore_gives_its_certificates_as_pem(stores: dict[str, Path], kind: str) -> None:
    pem = load_store(str(stores[kind]), kind, PW, "ca")
    assert pem.count("-----BEGIN CERTIFICATE-----") == 1
    assert _body(pem) == _body(stores["cert"].read_text())


def test_a_pem_truststore_is_read_as_it_is(stores: dict[str, Path]) -> None:
    assert _body(load_store(str(stores["cert"]), "PEM", None, "ca")) == _body(
        stores["cert"].read_text()
    )


def test_a_jks_keystore_gives_its_chain_and_key(stores: dict[str, Path]) -> None:
    pem = load_store(str(stores["keystore"]), "JKS", PW, "keystore")
    assert pem.index("-----BEGIN CERTIFICATE-----") < pem.index("-----BEGIN PRIVATE KEY-----")
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem.encode())
    assert cert.subject.rfc4514_string() == "CN=client"


def test_a_wrong_password_is_refused_without_showing_it(stores: dict[str, Path]) -> None:
    wrong = "wr0ng-s3cr3t"
    with pytest.raises(ConfigurationError) as info:
        load_store(str(stores["PKCS12"]), "PKCS12", wrong, "ca")
    message = str(info.value)
    assert "kafka.ssl.truststore.location" in message and "keytool said" in message
    assert wrong not in message and PW not in message


def test_a_missing_store_says_where_it_must_be(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="must be readable where the query is defined"):
        load_store(str(tmp_path / "nope.jks"), "JKS", PW, "ca")


def test_a_jks_key_with_its_own_password_is_opened_with_the_key_password(
    tmp_path: Path,
) -> None:
    # The Java client opens such a key with kafka.ssl.key.password; keytool would stop and ask.
    ks = tmp_path / "own-key-password.jks"
    env = dict(os.environ, PW=PW, KP="k3y-s3cr3t")
    subprocess.run(
        [_keytool(), "-genkeypair", "-alias", "svc", "-keyalg", "RSA", "-keysize", "2048",
         "-dname", "CN=svc", "-validity", "2", "-keystore", str(ks), "-storetype", "JKS",
         "-storepass:env", "PW", "-keypass:env", "KP"],
        env=env, capture_output=True, check=True,
    )  # fmt: skip
    pem = load_store(str(ks), "JKS", PW, "keystore", "k3y-s3cr3t")
    assert "-----BEGIN PRIVATE KEY-----" in pem
    from cryptography import x509

    assert x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string() == "CN=svc"
    with pytest.raises(ConfigurationError) as info:
        load_store(str(ks), "JKS", PW, "keystore", "wr0ng-k3y")
    assert "kafka.ssl.key.password" in str(info.value)
    assert "wr0ng-k3y" not in str(info.value) and PW not in str(info.value)


def test_a_pem_keystore_file_gives_its_chain_and_its_key_as_written(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    key = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----"
    path = tmp_path / "client-keystore.pem"
    path.write_text(stores["cert"].read_text() + key + "\n")
    pem = load_store(str(path), "PEM", None, "keystore", "any")
    assert pem.index("-----BEGIN CERTIFICATE-----") < pem.index(key)
    assert pem.count("PRIVATE KEY-----") == 2  # one key, untouched: ssl.key.password opens it
    lone = tmp_path / "no-key.pem"
    lone.write_text(stores["cert"].read_text())
    with pytest.raises(ConfigurationError, match="private key"):
        load_store(str(lone), "PEM", None, "keystore", None)
