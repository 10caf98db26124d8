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


# -- what the JVM takes from a store, and nothing more ---------------------------------------------


@pytest.fixture(scope="module")
def chained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``client.jks``: key entry "client" whose chain is [client, issuing CA], the CA not a
    trusted entry; ``two.jks``: that and another key entry; ``mixed.jks``: "client" and a
    trusted certificate of another party. With the issuing CA's PEM in ``ca.pem``."""
    d = tmp_path_factory.mktemp("chained")
    ks, ca = str(d / "client.jks"), str(d / "ca.jks")
    _kt("-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=ca",
        "-ext", "bc:c", "-validity", "2", "-keystore", ca, "-storetype", "JKS",
        "-storepass:env", "PW", "-keypass:env", "PW")  # fmt: skip
    _kt("-exportcert", "-rfc", "-alias", "ca", "-keystore", ca, "-storepass:env", "PW",
        "-file", str(d / "ca.pem"))  # fmt: skip
    _kt("-genkeypair", "-alias", "client", "-keyalg", "RSA", "-keysize", "2048",
        "-dname", "CN=client", "-validity", "2", "-keystore", ks, "-storetype", "JKS",
        "-storepass:env", "PW", "-keypass:env", "PW")  # fmt: skip
    _kt("-certreq", "-alias", "client", "-keystore", ks, "-storepass:env", "PW",
        "-file", str(d / "client.csr"))  # fmt: skip
    _kt("-gencert", "-alias", "ca", "-keystore", ca, "-storepass:env", "PW", "-rfc",
        "-infile", str(d / "client.csr"), "-outfile", str(d / "client.crt"))  # fmt: skip
    _kt("-importcert", "-noprompt", "-alias", "ca", "-file", str(d / "ca.pem"), "-keystore", ks,
        "-storepass:env", "PW")  # fmt: skip
    _kt("-importcert", "-alias", "client", "-file", str(d / "client.crt"), "-keystore", ks,
        "-storepass:env", "PW")  # fmt: skip
    _kt("-delete", "-alias", "ca", "-keystore", ks, "-storepass:env", "PW")
    out = {"client": d / "client.jks", "ca": d / "ca.pem"}
    for name, extra in (("two", "other"), ("mixed", None)):
        path = d / f"{name}.jks"
        path.write_bytes(out["client"].read_bytes())
        if extra:
            _kt("-genkeypair", "-alias", extra, "-keyalg", "RSA", "-keysize", "2048",
                "-dname", f"CN={extra}", "-validity", "2", "-keystore", str(path),
                "-storepass:env", "PW", "-keypass:env", "PW")  # fmt: skip
        else:
            _kt("-importcert", "-noprompt", "-alias", "partner", "-file", str(d / "ca.pem"),
                "-keystore", str(path), "-storepass:env", "PW")  # fmt: skip
        out[name] = path
    return out


def _subjects(pem: str) -> list[str]:
    import re

    from cryptography import x509

    blocks = re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", pem, re.S)
    return [x509.load_pem_x509_certificate(b.encode()).subject.rfc4514_string() for b in blocks]


def test_a_truststore_trusts_a_key_entrys_own_certificate_not_its_issuer(
    chained: dict[str, Path],
) -> None:
    # Java's trust manager takes a key entry's first certificate only: the issuing CA in its
    # chain must not become trusted (it was: the whole chain went to ssl.ca.pem).
    assert _subjects(load_store(str(chained["client"]), "JKS", PW, "ca")) == ["CN=client"]
    assert _subjects(load_store(str(chained["mixed"]), "JKS", PW, "ca")) == ["CN=client", "CN=ca"]


def test_a_keystore_gives_its_key_entrys_chain_and_nothing_else(
    chained: dict[str, Path],
) -> None:
    # Regression: the other entries' certificates were appended to ssl.certificate.pem.
    pem = load_store(str(chained["mixed"]), "JKS", PW, "keystore")
    assert _subjects(pem) == ["CN=client", "CN=ca"]
    assert pem.count("PRIVATE KEY-----") == 2


def test_a_keystore_with_several_keys_is_refused_naming_them(chained: dict[str, Path]) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_store(str(chained["two"]), "JKS", PW, "keystore")
    message = str(info.value)
    assert "kafka.ssl.keystore.location" in message and "one private key" in message
    assert "'client', 'other'" in message and "-srcalias" in message
    assert PW not in message


def test_a_pkcs12_keystore_of_old_encryption_is_read_for_librdkafka(tmp_path: Path) -> None:
    # OpenSSL 1.x's pkcs12 -export and keytool before JDK 8u301 encrypt with RC2-40 and 3DES:
    # librdkafka's OpenSSL 3 refuses such a file; the JVM, and so a Spark job, reads it.
    from confluent_kafka import KafkaException, Producer

    from kafka_direct.config.reader import kafka_params

    jks, p12 = str(tmp_path / "k.jks"), str(tmp_path / "legacy.p12")
    _kt("-genkeypair", "-alias", "c", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=c",
        "-validity", "2", "-keystore", jks, "-storetype", "JKS", "-storepass:env", "PW",
        "-keypass:env", "PW")  # fmt: skip
    _kt("-J-Dkeystore.pkcs12.legacy", "-importkeystore", "-noprompt", "-srckeystore", jks,
        "-srcstoretype", "JKS", "-srcstorepass:env", "PW", "-destkeystore", p12,
        "-deststoretype", "PKCS12", "-deststorepass:env", "PW")  # fmt: skip
    quiet = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "security.protocol": "SSL"}
    with pytest.raises(KafkaException, match="PKCS#12"):  # what the file alone gets
        Producer({**quiet, "ssl.keystore.location": p12, "ssl.keystore.password": PW})
    config = kafka_params(
        {**quiet, "ssl.keystore.location": p12, "ssl.keystore.type": "PKCS12",
         "ssl.keystore.password": PW}, owned={}, owner="sink",
    )  # fmt: skip
    assert "ssl.keystore.location" not in config  # executors need no copy of the file
    assert _subjects(config["ssl.certificate.pem"]) == ["CN=c"]
    Producer(config.to_dict())  # librdkafka takes the certificate and the key
