"""A Spark job's Java-client security options as librdkafka takes them
(kafka_direct.config.security): every translation and every refusal, table-style, with a stub
store loader; no broker, no keytool (tests/unit/kafka/test_keystores.py runs the real one)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_direct.config.reader import kafka_params
from kafka_direct.config.security import parse_jaas, translate
from kafka_direct.errors import ConfigurationError

PW = "pa55-s3cr3t"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"
OIDC = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
B = {"bootstrap.servers": "b:9092"}
CA = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nKEY-s3cr3t\n-----END PRIVATE KEY-----\n"


def jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


class Stores:
    """A store loader that records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str | None, str]] = []

    def __call__(self, path: str, kind: str, password: str | None, what: str) -> str:
        self.asked.append((path, kind, password, what))
        return CA if what == "ca" else CA + KEY


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            {"sasl.jaas.config": jaas(PLAIN, username="svc", password=PW)},
            {"sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": PW},
            id="PLAIN, mechanism implied",
        ),
        pytest.param(
            {"sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": jaas(SCRAM, username="svc", password=PW)},
            {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc", "sasl.password": PW},
            id="SCRAM-SHA-512",
        ),
        pytest.param(
            {"sasl.mechanism": "scram-sha-256",
             "sasl.jaas.config": f'{SCRAM} required username=svc password="p;a\\"ss";'},
            {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc",
             "sasl.password": 'p;a"ss'},
            id="unquoted and escaped values",
        ),
        pytest.param(
            {"sasl.jaas.config": jaas(OAUTH, clientId="app", clientSecret=PW, scope="kafka"),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
             "sasl.login.callback.handler.class": OIDC},
            {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.client.secret": PW,
             "sasl.oauthbearer.scope": "kafka",
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC client credentials, Kafka's handler dropped",
        ),
        pytest.param(
            {"sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW, extension_org="x"),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "a", "sasl.oauthbearer.client.secret": PW,
             "sasl.oauthbearer.extensions": "org=x",
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC with SASL extensions",
        ),
        pytest.param(
            {"sasl.jaas.config": jaas(OAUTH, unsecuredLoginStringClaim_sub="alice")},
            {"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
             "sasl.oauthbearer.config": "principal=alice"},
            id="unsecured JWT",
        ),
        pytest.param(
            {"sasl.jaas.config": f'{KRB5} required useKeyTab=true keyTab="/k.tab" '
                                 'principal="svc@REALM";'},
            {"sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k.tab",
             "sasl.kerberos.principal": "svc@REALM"},
            id="Kerberos keytab",
        ),
        pytest.param(
            {"ssl.endpoint.identification.algorithm": ""},
            {"ssl.endpoint.identification.algorithm": "none"},
            id="empty endpoint identification: no hostname check",
        ),
        pytest.param(
            {"ssl.endpoint.identification.algorithm": "https"},
            {"ssl.endpoint.identification.algorithm": "https"},
            id="https stays",
        ),
        pytest.param(
            {"ssl.truststore.certificates": CA}, {"ssl.ca.pem": CA}, id="inline truststore"
        ),
        pytest.param(
            {"ssl.keystore.certificate.chain": CA, "ssl.keystore.key": KEY},
            {"ssl.certificate.pem": CA, "ssl.key.pem": KEY},
            id="inline PEM keystore",
        ),
        pytest.param(
            {"ssl.truststore.location": "/ts.jks", "ssl.truststore.password": PW},
            {"ssl.ca.pem": CA},
            id="JKS truststore (the default type) inline",
        ),
        pytest.param(
            {"ssl.keystore.location": "/ks.p12", "ssl.keystore.type": "PKCS12",
             "ssl.keystore.password": PW},
            {"ssl.keystore.location": "/ks.p12", "ssl.keystore.password": PW},
            id="PKCS12 keystore: librdkafka reads it",
        ),
        pytest.param(
            {"ssl.keystore.location": "/ks.jks", "ssl.keystore.password": PW,
             "ssl.key.password": PW},
            {"ssl.certificate.pem": CA, "ssl.key.pem": KEY},
            id="JKS keystore as PEM",
        ),
        pytest.param({"security.protocol": "SASL_SSL"}, {"security.protocol": "SASL_SSL"},
                     id="librdkafka's own keys untouched"),
    ],
)  # fmt: skip
def test_translations(given: dict[str, str], expected: dict[str, str]) -> None:
    assert translate(given, load_store=Stores()) == expected


def test_stores_are_opened_with_their_type_and_password() -> None:
    stores = Stores()
    translate({"ssl.truststore.location": "/ts.p12", "ssl.truststore.type": "pkcs12",
               "ssl.truststore.password": PW}, load_store=stores)  # fmt: skip
    translate({"ssl.truststore.location": "/ts.pem", "ssl.truststore.type": "PEM"},
              load_store=stores)  # fmt: skip
    translate({"ssl.keystore.location": "/ks.jks", "ssl.keystore.password": PW},
              load_store=stores)  # fmt: skip
    assert stores.asked == [
        ("/ts.p12", "PKCS12", PW, "ca"),
        ("/ts.pem", "PEM", None, "ca"),
        ("/ks.jks", "JKS", PW, "keystore"),
    ]


@pytest.mark.parametrize(
    ("given", "option", "phrase"),
    [
        pytest.param({"sasl.jaas.config": "not jaas at all"}, "kafka.sasl.jaas.config",
                     "required key=", id="not a JAAS line"),
        pytest.param({"sasl.jaas.config": jaas(PLAIN, username="u", password=PW) + " x y"},
                     "kafka.sasl.jaas.config", "one login module", id="trailing garbage"),
        pytest.param({"sasl.jaas.config": jaas(PLAIN, username="u")},
                     "kafka.sasl.jaas.config", "'password'", id="PLAIN without password"),
        pytest.param({"sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.jaas.config": jaas(PLAIN, username="u", password=PW)},
                     "kafka.sasl.mechanism", "'PLAIN'", id="PLAIN module, SCRAM mechanism"),
        pytest.param({"sasl.jaas.config": jaas(SCRAM, username="u", password=PW)},
                     "kafka.sasl.mechanism", "'SCRAM-SHA-256' or 'SCRAM-SHA-512'",
                     id="SCRAM without a mechanism"),
        pytest.param({"sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.jaas.config": jaas(SCRAM, username="u", password=PW, tokenauth="true")},
                     "kafka.sasl.jaas.config", "delegation tokens", id="delegation tokens"),
        pytest.param({"sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW)},
                     "kafka.sasl.oauthbearer.token.endpoint.url", "token endpoint",
                     id="OIDC without an endpoint"),
        pytest.param({"sasl.jaas.config": f"{KRB5} required useTicketCache=true;"},
                     "kafka.sasl.jaas.config", "keytab", id="Kerberos without a keytab"),
        pytest.param({"sasl.jaas.config": jaas("com.acme.Login", password=PW)},
                     "kafka.sasl.jaas.config", "Java code", id="a custom login module"),
        pytest.param({"sasl.jaas.config": jaas(PLAIN, username="u", password=PW),
                      "sasl.password": PW},
                     "kafka.sasl.password", "not both", id="JAAS and librdkafka's keys"),
        pytest.param({"ssl.keystore.location": "/k", "ssl.keystore.type": "PEM"},
                     "kafka.ssl.keystore.type", "'JKS' or 'PKCS12'", id="a PEM keystore file"),
    ],
)  # fmt: skip
def test_refusals_name_the_option_and_never_the_secret(
    given: dict[str, str], option: str, phrase: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        translate(given, load_store=Stores())
    message = str(info.value)
    assert info.value.option == option
    assert phrase in message, message
    assert PW not in message and PW not in repr(info.value.value)


@pytest.mark.parametrize(
    ("handler", "allowed"),
    [
        pytest.param(OIDC, True, id="Kafka's OIDC handler"),
        pytest.param(OIDC.replace("oauthbearer.", "oauthbearer.secured."), True, id="older"),
        pytest.param("software.amazon.msk.auth.iam.IAMClientCallbackHandler", False, id="MSK"),
    ],
)
def test_only_kafkas_own_oidc_handler_is_translated(handler: str, allowed: bool) -> None:
    params: dict[str, Any] = {
        **B,
        "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW),
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.login.callback.handler.class": handler,
    }
    if allowed:
        config = kafka_params(params, owned={}, owner="source")
        assert "sasl.login.callback.handler.class" not in config
        assert config["sasl.oauthbearer.method"] == "oidc"
    else:
        with pytest.raises(ConfigurationError, match="Java code librdkafka cannot run") as info:
            kafka_params(params, owned={}, owner="source")
        assert PW not in str(info.value)


def test_the_kafka_config_never_shows_the_translated_secrets() -> None:
    config = kafka_params(
        {**B, "sasl.jaas.config": jaas(PLAIN, username="svc", password=PW)},
        owned={},
        owner="source",
    )
    assert config["sasl.password"] == PW
    assert PW not in repr(config) and PW not in str(config)


def test_parse_jaas_keeps_every_option() -> None:
    entry = parse_jaas(f'{PLAIN} required username="a b" password={PW} other="x=y";')
    assert entry.module == PLAIN
    assert dict(entry.options) == {"username": "a b", "password": PW, "other": "x=y"}
