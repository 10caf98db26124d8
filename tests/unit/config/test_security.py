"""A Spark job's Java-client security options as librdkafka takes them
(kafka_direct.config.security): every translation and every refusal, table-style, with a stub
store loader and a stub of librdkafka's build; no broker, no keytool
(tests/unit/kafka/test_keystores.py runs the real one)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from kafka_direct.config import oauth
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
SASL = {"security.protocol": "SASL_SSL"}
TLS = {"security.protocol": "SSL"}
CA = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nKEY-s3cr3t\n-----END PRIVATE KEY-----\n"
ENCRYPTED = (
    "-----BEGIN ENCRYPTED PRIVATE KEY-----\nKEY-s3cr3t\n-----END ENCRYPTED PRIVATE KEY-----\n"
)


def jaas(module: str, **options: str) -> str:
    return f"{module} required " + " ".join(f'{k}="{v}"' for k, v in options.items()) + ";"


class Stores:
    """A store loader that records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str | None, str, str | None]] = []

    def __call__(
        self, path: str, kind: str, password: str | None, what: str, key_password: str | None
    ) -> str:
        self.asked.append((path, kind, password, what, key_password))
        return CA if what == "ca" else CA + (ENCRYPTED if kind == "PEM" else KEY)


def yes(feature: str) -> bool:
    """librdkafka built with every feature (Kerberos too)."""
    return True


def no_kerberos(feature: str) -> bool:
    """librdkafka as confluent-kafka's wheels from PyPI build it: no sasl_gssapi."""
    return feature != "sasl_gssapi"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(PLAIN, username="svc", password=PW)},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": PW},
            id="PLAIN, mechanism implied",
        ),
        pytest.param(
            {**SASL, "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": jaas(SCRAM, username="svc", password=PW)},
            {**SASL, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
             "sasl.password": PW},
            id="SCRAM-SHA-512",
        ),
        pytest.param(
            {**SASL, "sasl.mechanism": "scram-sha-256",
             "sasl.jaas.config": f'{SCRAM} required username=svc password="p;a\\"ss";'},
            {**SASL, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc",
             "sasl.password": 'p;a"ss'},
            id="unquoted and escaped values",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="app", clientSecret=PW,
                                              scope="kafka"),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
             "sasl.login.callback.handler.class": OIDC},
            {**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.client.secret": PW,
             "sasl.oauthbearer.scope": "kafka",
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC client credentials, Kafka's handler dropped",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                              extension_org="x"),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            {**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "a", "sasl.oauthbearer.client.secret": PW,
             "sasl.oauthbearer.extensions": "org=x",
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC with SASL extensions",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                              **{"ssl.truststore.location": "/idp.jks",
                                                 "ssl.truststore.password": PW}),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            {**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "a", "sasl.oauthbearer.client.secret": PW,
             "https.ca.pem": CA, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC: the identity provider's truststore in the JAAS line",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                              **{"ssl.truststore.certificates":
                                                     CA.replace("\n", "\\n"),
                                                 "ssl.enabled.protocols": "TLSv1.3"}),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            {**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "a", "sasl.oauthbearer.client.secret": PW,
             "https.ca.pem": CA, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC: the identity provider's inline CA and TLS version",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, clientId=" a\\n", clientSecret=PW + "\\t",
                                              scope=" kafka "),
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            {**SASL, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
             "sasl.oauthbearer.client.id": "a", "sasl.oauthbearer.client.secret": PW,
             "sasl.oauthbearer.scope": "kafka",
             "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
            id="OIDC: client id, secret and scope trimmed, as Kafka's OIDC login does",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, unsecuredLoginStringClaim_sub="alice")},
            {**SASL, "sasl.mechanism": "OAUTHBEARER",
             "enable.sasl.oauthbearer.unsecure.jwt": "true",
             "sasl.oauthbearer.config": "principal=alice"},
            id="unsecured JWT",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": jaas(OAUTH, unsecuredLoginLifetimeSeconds="600",
                                              unsecuredLoginStringClaim_sub="alice",
                                              unsecuredLoginListClaim_scope="|read|write",
                                              unsecuredLoginExtension_traceId="abc")},
            {**SASL, "sasl.mechanism": "OAUTHBEARER",
             "enable.sasl.oauthbearer.unsecure.jwt": "true",
             "sasl.oauthbearer.config":
                 "principal=alice lifeSeconds=600 scope=read,write extension_traceId=abc"},
            id="unsecured JWT with its lifetime, scope list and extensions",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f'{KRB5} required useKeyTab=true keyTab="/k.tab" '
                                         'serviceName="kafka-prod";'},
            {**SASL, "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k.tab",
             "sasl.kerberos.service.name": "kafka-prod"},
            id="Kerberos service name from the login module",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f'{KRB5} required useKeyTab=true keyTab="/k.tab" '
                                         'principal="svc@REALM";'},
            {**SASL, "sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/k.tab",
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
            {**TLS, "ssl.truststore.certificates": CA}, {**TLS, "ssl.ca.pem": CA},
            id="inline truststore",
        ),
        pytest.param(
            {**TLS, "ssl.truststore.certificates": CA, "ssl.truststore.type": "PEM"},
            {**TLS, "ssl.ca.pem": CA},
            id="inline truststore with its type, as the Java client requires",
        ),
        pytest.param(
            {**TLS, "ssl.keystore.certificate.chain": CA, "ssl.keystore.key": KEY},
            {**TLS, "ssl.certificate.pem": CA, "ssl.key.pem": KEY},
            id="inline PEM keystore",
        ),
        pytest.param(
            {**TLS, "ssl.keystore.certificate.chain": CA, "ssl.keystore.key": ENCRYPTED,
             "ssl.keystore.type": "pem", "ssl.key.password": PW},
            {**TLS, "ssl.certificate.pem": CA, "ssl.key.pem": ENCRYPTED, "ssl.key.password": PW},
            id="inline encrypted PEM key with its type and password",
        ),
        pytest.param(
            {**TLS, "ssl.keystore.location": "/ks.pem", "ssl.keystore.type": "PEM",
             "ssl.key.password": PW},
            {**TLS, "ssl.certificate.pem": CA, "ssl.key.pem": ENCRYPTED, "ssl.key.password": PW},
            id="PEM keystore file: inline, its key as written",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f"{PLAIN} required username='svc' password='{PW}';"},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": PW},
            id="single-quoted values, as Java's tokenizer takes them",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f"{PLAIN} required /* svc */ username=\"svc\" // login\n"
                                         f" password=\"{PW}\\t\\101\";"},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "svc",
             "sasl.password": PW + "\tA"},
            id="comments, and Java's escapes in quoted values",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f"{PLAIN} /* c */ required username=u password={PW};"},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PW},
            id="a comment between the module and its flag",
        ),
        pytest.param(
            {**SASL, "sasl.jaas.config": f'"{PLAIN}" "required" username=u password={PW};'},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PW},
            id="a quoted module name and flag, as Java's tokenizer takes them",
        ),
        pytest.param(
            {**SASL, "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": f"kafkashaded.{PLAIN} required username='u' password='{PW}';"},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PW},
            id="Databricks' shaded Kafka module",
        ),
        pytest.param(
            {**TLS, "ssl.truststore.location": "/ts.jks", "ssl.truststore.password": PW},
            {**TLS, "ssl.ca.pem": CA},
            id="JKS truststore (the default type) inline",
        ),
        pytest.param(
            {**TLS, "ssl.keystore.location": "/ks.p12", "ssl.keystore.type": "PKCS12",
             "ssl.keystore.password": PW, "ssl.key.password": PW},
            {**TLS, "ssl.certificate.pem": CA, "ssl.key.pem": KEY},
            id="PKCS12 keystore as PEM, as a JKS one (librdkafka refuses old PKCS12 ciphers)",
        ),
        pytest.param(
            {**TLS, "ssl.keystore.location": "/ks.jks", "ssl.keystore.password": PW,
             "ssl.key.password": PW},
            {**TLS, "ssl.certificate.pem": CA, "ssl.key.pem": KEY},
            id="JKS keystore as PEM",
        ),
        pytest.param(
            {**TLS, "ssl.truststore.type": "JKS", "ssl.keystore.type": "PKCS12"}, TLS,
            id="store types without stores: the system's CAs, no client certificate, as Java",
        ),
        pytest.param(
            {**TLS, "ssl.protocol": "TLSv1.2", "ssl.enabled.protocols": "TLSv1.2, TLSv1.3"}, TLS,
            id="TLS versions librdkafka negotiates anyway",
        ),
        pytest.param(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "u", "ssl.truststore.location": "/missing.jks",
             "ssl.truststore.password": PW, "ssl.protocol": "TLSv1.1"},
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "u"},
            id="TLS settings without TLS: dropped unread, as in Java",
        ),
        pytest.param(
            {**TLS, "sasl.jaas.config": jaas("com.acme.Login", password=PW),
             "sasl.client.callback.handler.class": "com.acme.Handler"},
            TLS,
            id="SASL settings without SASL: dropped unread, as in Java",
        ),
        pytest.param(
            {"security.protocol": "SASL_SSL\n", "sasl.mechanism": "PLAIN ",
             "sasl.jaas.config": jaas(PLAIN, username="u", password=PW) + "\n",
             "ssl.truststore.location": "/ts.jks\n", "ssl.truststore.password": "tpw\n"},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": PW,
             "ssl.ca.pem": CA},
            id="Java settings' values trimmed, as Java's ConfigDef does",
        ),
        pytest.param(
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": " u", "sasl.password": PW + " "},
            {**SASL, "sasl.mechanism": "PLAIN", "sasl.username": " u", "sasl.password": PW + " "},
            id="librdkafka's own keys untouched",
        ),
    ],
)  # fmt: skip
def test_translations(given: dict[str, str], expected: dict[str, str]) -> None:
    assert translate(given, load_store=Stores(), has_feature=yes) == expected


def test_stores_are_opened_with_their_type_and_password() -> None:
    stores = Stores()
    translate({**TLS, "ssl.truststore.location": "/ts.p12", "ssl.truststore.type": "pkcs12",
               "ssl.truststore.password": PW + "\n"}, load_store=stores)  # fmt: skip
    translate({**TLS, "ssl.truststore.location": "/ts.pem", "ssl.truststore.type": "PEM"},
              load_store=stores)  # fmt: skip
    translate({**TLS, "ssl.keystore.location": "/ks.jks", "ssl.keystore.password": PW},
              load_store=stores)  # fmt: skip
    translate({**TLS, "ssl.keystore.location": "/ks.jks", "ssl.keystore.password": PW,
               "ssl.key.password": "k3y-pa55"}, load_store=stores)  # fmt: skip
    translate({**TLS, "ssl.keystore.location": " /ks.p12 ", "ssl.keystore.type": "PKCS12 ",
               "ssl.keystore.password": PW}, load_store=stores)  # fmt: skip
    assert stores.asked == [
        ("/ts.p12", "PKCS12", PW, "ca", None),  # the password trimmed, as Java does
        ("/ts.pem", "PEM", None, "ca", None),
        ("/ks.jks", "JKS", PW, "keystore", None),
        ("/ks.jks", "JKS", PW, "keystore", "k3y-pa55"),  # a key password of its own
        ("/ks.p12", "PKCS12", PW, "keystore", None),  # read here too (old PKCS12 ciphers)
    ]


@pytest.mark.parametrize(
    ("given", "option", "phrase"),
    [
        pytest.param({**SASL, "sasl.jaas.config": "not jaas at all"}, "kafka.sasl.jaas.config",
                     "required key=", id="not a JAAS line"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(PLAIN, username="u", password=PW) + " x y"},
                     "kafka.sasl.jaas.config", "one login module", id="trailing garbage"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(PLAIN, username="u")},
                     "kafka.sasl.jaas.config", "'password'", id="PLAIN without password"),
        pytest.param({**SASL, "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.jaas.config": jaas(PLAIN, username="u", password=PW)},
                     "kafka.sasl.mechanism", "'PLAIN'", id="PLAIN module, SCRAM mechanism"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(SCRAM, username="u", password=PW)},
                     "kafka.sasl.mechanism", "'SCRAM-SHA-256' or 'SCRAM-SHA-512'",
                     id="SCRAM without a mechanism"),
        pytest.param({**SASL, "sasl.mechanism": "SCRAM-SHA-512",
                      "sasl.jaas.config": jaas(SCRAM, username="u", password=PW, tokenauth="true")},
                     "kafka.sasl.jaas.config", "delegation tokens", id="delegation tokens"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW)},
                     "kafka.sasl.oauthbearer.token.endpoint.url", "token endpoint",
                     id="OIDC without an endpoint"),
        pytest.param({**SASL, "sasl.jaas.config": f"{KRB5} required useTicketCache=true;"},
                     "kafka.sasl.jaas.config", "keytab", id="Kerberos without a keytab"),
        pytest.param({**SASL, "sasl.jaas.config": jaas("com.acme.Login", password=PW)},
                     "kafka.sasl.jaas.config", "Java code", id="a custom login module"),
        pytest.param({**SASL, "sasl.jaas.config": jaas("com.acme.Login", password=PW)},
                     "kafka.sasl.jaas.config", "'oauthProvider'",
                     id="a custom login module: the cloud tokens' way is named"),
        pytest.param({**SASL, "sasl.jaas.config": f"kafkashaded.{KRB5} required;"},
                     "kafka.sasl.jaas.config", "Java code",
                     id="only Kafka's own modules are unshaded"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(PLAIN, username="u", password=PW),
                      "sasl.password": PW},
                     "kafka.sasl.password", "not both", id="JAAS and librdkafka's keys"),
        pytest.param({**TLS, "ssl.keystore.location": "/k", "ssl.keystore.type": "BCFKS"},
                     "kafka.ssl.keystore.type", "'JKS', 'PKCS12' or 'PEM'",
                     id="a keystore type librdkafka cannot be given"),
        pytest.param({**TLS, "ssl.truststore.certificates": CA, "ssl.truststore.type": "JKS"},
                     "kafka.ssl.truststore.type", "'PEM' (or no value)",
                     id="inline certificates of another type"),
        pytest.param({**TLS, "ssl.keystore.key": KEY, "ssl.keystore.certificate.chain": CA,
                      "ssl.keystore.type": "PKCS12"},
                     "kafka.ssl.keystore.type", "'PEM' (or no value)",
                     id="an inline key of another type"),
        pytest.param({**TLS, "ssl.truststore.certificates": CA,
                      "ssl.truststore.location": "/ts.jks"},
                     "kafka.ssl.truststore.certificates", "refuses both",
                     id="a truststore twice, as Java refuses"),
        pytest.param({**TLS, "ssl.truststore.password": PW}, "kafka.ssl.truststore.password",
                     "only with its truststore", id="a truststore password alone, as Java"),
        pytest.param({**TLS, "ssl.keystore.password": PW}, "kafka.ssl.keystore.password",
                     "only with its keystore", id="a keystore password alone, as Java"),
        pytest.param({**TLS, "ssl.protocol": "TLSv1.1"}, "kafka.ssl.protocol",
                     "negotiates TLS 1.2 or 1.3", id="a TLS version librdkafka cannot speak"),
        pytest.param({**TLS, "ssl.enabled.protocols": "TLSv1.2,TLSv1.1"},
                     "kafka.ssl.enabled.protocols", "'TLSv1.2' or 'TLSv1.3'",
                     id="an enabled TLS version librdkafka cannot speak"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, unsecuredLoginStringClaim_sub="a b")},
                     "kafka.sasl.jaas.config", "without spaces", id="unsecured sub with a space"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, unsecuredLoginStringClaim_sub="a",
                                                       unsecuredLoginStringClaim_iss="me")},
                     "kafka.sasl.jaas.config", "unsecuredLoginStringClaim_iss",
                     id="an unsecured claim librdkafka cannot add"),
        pytest.param({**SASL, "sasl.jaas.config": f"{PLAIN} required username='u' password='{PW};"},
                     "kafka.sasl.jaas.config", "no closing quote", id="an unclosed quote"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                                       **{"ssl.keystore.location": "/c.p12"}),
                      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
                     "kafka.sasl.jaas.config", "no client certificate",
                     id="OIDC: a client certificate for the identity provider"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                                       **{"ssl.protocol": "TLSv1.1"}),
                      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
                     "kafka.sasl.jaas.config", "its ssl.protocol",
                     id="OIDC: a TLS version librdkafka cannot speak"),
        pytest.param({**SASL, "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW,
                                                       **{"ssl.truststore.password": PW}),
                      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
                     "kafka.sasl.jaas.config", "only with its truststore",
                     id="OIDC: a truststore password without its truststore"),
    ],
)  # fmt: skip
def test_refusals_name_the_option_and_never_the_secret(
    given: dict[str, str], option: str, phrase: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        translate(given, load_store=Stores(), has_feature=yes)
    message = str(info.value)
    assert info.value.option == option
    assert phrase in message, message
    assert PW not in message and PW not in repr(info.value.value)


@pytest.mark.parametrize(
    ("given", "option"),
    [
        pytest.param({**SASL, "sasl.jaas.config": f'{KRB5} required useKeyTab=true '
                                                  'keyTab="/k.tab";'},
                     "kafka.sasl.jaas.config", id="a Krb5LoginModule line"),
        pytest.param({**SASL, "sasl.jaas.config": f"{KRB5} required useTicketCache=true;"},
                     "kafka.sasl.jaas.config", id="a Krb5LoginModule without a keytab"),
        pytest.param({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "gssapi",
                      "sasl.kerberos.keytab": "/k.tab"},
                     "kafka.sasl.mechanism", id="sasl.mechanism GSSAPI"),
        pytest.param({**SASL, "sasl.username": "u", "sasl.password": PW},
                     "kafka.security.protocol", id="SASL with no mechanism (GSSAPI by default)"),
    ],
)  # fmt: skip
def test_kerberos_without_a_librdkafka_built_for_it_is_refused_before_any_client(
    given: dict[str, str], option: str
) -> None:
    # Without the check, the first client failed with "No provider for SASL mechanism GSSAPI",
    # which kafka_direct reported as an option of librdkafka's that may be too old.
    with pytest.raises(ConfigurationError) as info:
        translate(given, load_store=Stores(), has_feature=no_kerberos)
    message = str(info.value)
    assert info.value.option == option, message
    assert "sasl_gssapi" in message and "Cyrus SASL" in message and "--no-binary" in message
    assert "kinit" not in message  # the keytab advice cannot help such a librdkafka
    assert PW not in message


def test_kerberos_is_not_asked_about_where_it_is_not_used() -> None:
    asked: list[str] = []

    def recorded(feature: str) -> bool:
        asked.append(feature)
        return False

    for given in (
        {"security.protocol": "PLAINTEXT", "sasl.mechanism": "GSSAPI"},
        {**SASL, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u"},
        {**SASL, "sasl.jaas.config": jaas(PLAIN, username="u", password=PW)},
        # A misspelt protocol is librdkafka's to refuse by name ('Invalid value'), not GSSAPI.
        {"security.protocol": "SASL_PLAINTXT"},
    ):
        translate(given, has_feature=recorded)
    assert asked == []


def test_the_installed_librdkafka_is_asked_cheaply() -> None:
    from kafka_direct.config.jaas import librdkafka_has

    assert librdkafka_has("sasl_plain") is True
    assert librdkafka_has("no_such_feature") is False


@pytest.mark.parametrize(
    ("given", "option", "cloud"),
    [
        # AWS's own configuration for MSK IAM with the Java client (aws-msk-iam-auth).
        pytest.param({**SASL, "sasl.mechanism": "AWS_MSK_IAM",
                      "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
                      "sasl.client.callback.handler.class":
                          "software.amazon.msk.auth.iam.IAMClientCallbackHandler"},
                     "kafka.sasl.client.callback.handler.class", "Amazon MSK IAM",
                     id="MSK IAM (AWS_MSK_IAM)"),
        pytest.param({**SASL, "sasl.mechanism": "OAUTHBEARER",
                      "sasl.jaas.config": f"{OAUTH} required;",
                      "sasl.login.callback.handler.class":
                          "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
                      "sasl.client.callback.handler.class":
                          "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"},
                     "kafka.sasl.login.callback.handler.class", "Amazon MSK IAM",
                     id="MSK IAM (OAUTHBEARER)"),
        pytest.param({**SASL, "sasl.mechanism": "AWS_MSK_IAM",
                      "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"},
                     "kafka.sasl.jaas.config", "Amazon MSK IAM", id="MSK IAM's module alone"),
        pytest.param({**SASL, "sasl.mechanism": "OAUTHBEARER",
                      "sasl.jaas.config": f"{OAUTH} required;",
                      "sasl.login.callback.handler.class":
                          "com.google.cloud.hosted.kafka.auth.GcpLoginCallbackHandler"},
                     "kafka.sasl.login.callback.handler.class", "Google Cloud",
                     id="Google Cloud's Managed Kafka"),
        pytest.param({**SASL, "sasl.mechanism": "OAUTHBEARER",
                      "sasl.jaas.config": f"{OAUTH} required;",
                      "sasl.login.callback.handler.class": "com.acme.EntraHandler"},
                     "kafka.sasl.login.callback.handler.class", "Microsoft Entra",
                     id="a handler of the user's own (Event Hubs' samples)"),
    ],
)  # fmt: skip
def test_cloud_sign_ins_are_refused_naming_oauth_provider(
    given: dict[str, str], option: str, cloud: str
) -> None:
    # The handler is judged before the JAAS line: MSK's OAUTHBEARER setup used to be told it
    # misses sasl.oauthbearer.token.endpoint.url.
    with pytest.raises(ConfigurationError) as info:
        kafka_params({**B, **given}, owned={}, owner="source")
    message = str(info.value)
    assert info.value.option == option, message
    assert "'oauthProvider'" in message and cloud in message, message
    assert "token.endpoint" not in message


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
        **SASL,
        "sasl.jaas.config": jaas(OAUTH, clientId="a", clientSecret=PW),
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.login.callback.handler.class": handler,
    }
    if allowed:
        config = kafka_params(params, owned={}, owner="source")
        assert "sasl.login.callback.handler.class" not in config
        assert config["sasl.oauthbearer.method"] == "oidc"
    else:
        with pytest.raises(ConfigurationError, match="librdkafka cannot run") as info:
            kafka_params(params, owned={}, owner="source")
        assert PW not in str(info.value)
        assert "'oauthProvider'" in str(info.value)  # what a cloud's job uses instead


def test_what_a_protocol_does_not_use_is_dropped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The Java client builds TLS only for SSL/SASL_SSL and loads JAAS only for SASL_*: a store
    # missing here, or a login module, must not stop a job that runs on the JVM connector.
    with caplog.at_level(logging.WARNING, logger="kafka_direct.config.security"):
        config = kafka_params(
            {**B, "ssl.truststore.location": "/nowhere/ts.jks", "ssl.truststore.password": PW,
             "sasl.jaas.config": jaas("com.acme.Login", password=PW)},
            owned={}, owner="source",
        )  # fmt: skip
    assert dict(config) == B
    assert "kafka.ssl.truststore.location, kafka.ssl.truststore.password" in caplog.text
    assert "kafka.sasl.jaas.config" in caplog.text and "'PLAINTEXT'" in caplog.text
    assert PW not in caplog.text


def test_a_stores_refusal_names_the_option_as_the_user_wrote_it() -> None:
    def unreadable(path: str, kind: str, password: str | None, what: str,
                   key_password: str | None) -> str:  # fmt: skip
        raise ConfigurationError("kafka.ssl.keystore.location", path, "a readable file",
                                 "See kafka.ssl.key.password.")  # fmt: skip

    given = {**TLS, "ssl.keystore.location": "/ks.p12", "ssl.keystore.type": "PKCS12"}
    with pytest.raises(ConfigurationError) as info:
        translate(given, prefix="", load_store=unreadable)
    assert info.value.option == "ssl.keystore.location"  # kafkaParams, a properties file
    assert "kafka." not in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        translate(given, load_store=unreadable)
    assert info.value.option == "kafka.ssl.keystore.location"


def test_the_kafka_config_never_shows_the_translated_secrets() -> None:
    config = kafka_params(
        {**B, **SASL, "sasl.jaas.config": jaas(PLAIN, username="svc", password=PW)},
        owned={},
        owner="source",
    )
    assert config["sasl.password"] == PW
    assert PW not in repr(config) and PW not in str(config)


def test_parse_jaas_keeps_every_option() -> None:
    entry = parse_jaas(f'{PLAIN} required username="a b" password={PW} other="x=y";')
    assert entry.module == PLAIN
    assert dict(entry.options) == {"username": "a b", "password": PW, "other": "x=y"}


def test_a_parsed_jaas_line_never_shows_its_password() -> None:
    entry = parse_jaas(f'{PLAIN} required username="u" password="{PW}";')
    assert PW not in repr(entry) and PW not in str(entry)
    assert entry.options["password"] == PW


# ---------------------------------------------------------------------------------- oauthProvider
# Token functions for the rows below, imported by name as in every Spark process.
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzdmMifQ.c2ln"  # a JWT whose sub is "svc"
GOOD = f"{__name__}:good_token"


def good_token() -> tuple[str, float]:
    return TOKEN, time.time() + 600


def full_token() -> tuple[str, float, str, dict[str, str]]:
    return TOKEN, time.time() + 600, "alice", {"logicalCluster": "lkc-1"}


def opaque_token() -> tuple[str, float]:
    return "opaque-" + PW, time.time() + 600  # MSK's tokens are no JWT


def expired_token() -> tuple[str, float]:
    return TOKEN, time.time() - 5


def milliseconds_token() -> tuple[str, float]:
    return TOKEN, (time.time() + 600) * 1000


def one_item() -> tuple[str]:
    return (TOKEN,)


def not_a_string() -> tuple[bytes, float]:
    return TOKEN.encode(), time.time() + 600


def raises() -> tuple[str, float]:
    raise RuntimeError(f"the cloud said no to {PW}")


NOT_CALLABLE = 42


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param({}, {"sasl.mechanism": "OAUTHBEARER",
                          "sasl.oauthbearer.config": f"kafka_direct.oauthProvider={GOOD}"},
                     id="mechanism implied"),
        pytest.param({"sasl.mechanism": "oauthbearer", "security.protocol": "SASL_SSL"},
                     {"sasl.mechanism": "OAUTHBEARER", "security.protocol": "SASL_SSL",
                      "sasl.oauthbearer.config": f"kafka_direct.oauthProvider={GOOD}"},
                     id="mechanism given"),
        pytest.param({**SASL, "sasl.login.callback.handler.class":
                      "software.amazon.msk.auth.iam.IAMClientCallbackHandler"},
                     None, id="(a Java handler is still refused)"),
    ],
)  # fmt: skip
def test_a_token_function_becomes_librdkafkas_token_callback(
    given: dict[str, str], expected: dict[str, str] | None
) -> None:
    if expected is None:
        with pytest.raises(ConfigurationError, match="librdkafka cannot run"):
            kafka_params({**B, **given}, owned={}, owner="source", oauth_provider=GOOD)
        return
    config = kafka_params({**B, **given}, owned={}, owner="source", oauth_provider=GOOD)
    assert dict(config) == {**B, **expected}
    # Its settings say it again wherever they travel (the DStream API's batches, executors).
    assert kafka_params(dict(config), owned={}, owner="source") == config
    assert oauth.provider_spec(config) == GOOD


@pytest.mark.parametrize(
    ("provider", "given", "option", "phrase"),
    [
        pytest.param("no_such_module_xyz:token", {}, "oauthProvider", "Importing",
                     id="unimportable"),
        pytest.param(f"{__name__}:no_such_function", {}, "oauthProvider", "has no",
                     id="no such function"),
        pytest.param("just_a_name", {}, "oauthProvider", "'package.module:function'",
                     id="not a dotted name"),
        pytest.param(f"{__name__}:NOT_CALLABLE", {}, "oauthProvider", "callable",
                     id="not callable"),
        pytest.param(f"{__name__}.raises", {}, "oauthProvider", "raised RuntimeError",
                     id="it raises (dotted name)"),
        pytest.param(f"{__name__}:expired_token", {}, "oauthProvider", "already expired",
                     id="expired"),
        pytest.param(f"{__name__}:milliseconds_token", {}, "oauthProvider", "divided by 1000",
                     id="milliseconds"),
        pytest.param(f"{__name__}:one_item", {}, "oauthProvider", "a tuple of 1",
                     id="one item"),
        pytest.param(f"{__name__}:not_a_string", {}, "oauthProvider", "of type bytes",
                     id="bytes token"),
        pytest.param(GOOD, {"sasl.mechanism": "PLAIN"}, "kafka.sasl.mechanism", "'OAUTHBEARER'",
                     id="another mechanism"),
        pytest.param(GOOD, {"sasl.oauthbearer.method": "oidc"}, "kafka.sasl.oauthbearer.method",
                     "remove", id="and OIDC"),
        pytest.param(GOOD, {"sasl.jaas.config": jaas(PLAIN, username="u", password=PW)},
                     "kafka.sasl.jaas.config", "remove", id="and a JAAS line"),
        pytest.param(GOOD, {"sasl.oauthbearer.config": f"principal={PW}"},
                     "kafka.sasl.oauthbearer.config", "remove", id="and an oauthbearer config"),
    ],
)  # fmt: skip
def test_a_bad_token_function_is_refused_naming_it(
    provider: str, given: dict[str, str], option: str, phrase: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        kafka_params({**B, **given}, owned={}, owner="source", oauth_provider=provider)
    message = str(info.value)
    assert info.value.option == option, message
    assert phrase in message, message
    if option == "oauthProvider":
        assert repr(provider) in message  # the function's name is no secret: shown
    assert PW not in message and TOKEN not in message and "eyJ" not in message


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        pytest.param(GOOD, (TOKEN, "svc", {}), id="principal from the JWT's sub"),
        pytest.param(f"{__name__}:full_token", (TOKEN, "alice", {"logicalCluster": "lkc-1"}),
                     id="principal and extensions given"),
        pytest.param(f"{__name__}:opaque_token", ("opaque-" + PW, "kafka-direct", {}),
                     id="an opaque token"),
    ],
)  # fmt: skip
def test_the_callback_gives_librdkafka_token_expiry_principal_extensions(
    provider: str, expected: tuple[str, str, dict[str, str]]
) -> None:
    callback = oauth.oauth_callback({"sasl.oauthbearer.config": oauth.MARKER + provider})
    assert callback is not None
    token, expiry, principal, extensions = callback("ignored")
    assert (token, principal, extensions) == expected
    assert time.time() < expiry <= time.time() + 601


def test_no_callback_without_a_token_function() -> None:
    assert oauth.oauth_callback({"sasl.oauthbearer.config": "principal=alice"}) is None
    assert oauth.oauth_callback(B) is None


def test_the_dstream_api_takes_it_in_kafka_params() -> None:
    from kafka_direct.config.dstream import validate_params

    kafka, group, _ = validate_params({**B, "group.id": "g", "oauthProvider": GOOD})
    assert (group, oauth.provider_spec(kafka), kafka["sasl.mechanism"]) == (
        "g", GOOD, "OAUTHBEARER"
    )  # fmt: skip
    assert "oauthProvider" not in kafka
