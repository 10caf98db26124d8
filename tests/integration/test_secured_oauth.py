"""OAUTHBEARER on real Apache Kafka that validates tokens itself (SecuredKafkaCluster with the
kit's OIDC provider: a JWKS and a client-credentials token endpoint), through the shared local
Spark: a Spark job's OAuthBearerLoginModule options as written, and a token provider function
(the way Amazon MSK IAM and Microsoft Entra tokens reach librdkafka). Reads and writes exact by
count and content; a wrong client secret fails fast without the secret in the message.

Regression: OAUTHBEARER was translated but never tried against a broker that checks tokens.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_direct.testing.secured_cluster import SecuredKafkaCluster
from tests.integration import oauth_providers as providers
from tests.integration.secured_helpers import produce as _produce
from tests.integration.secured_helpers import read_back as _read_back
from tests.integration.secured_helpers import values as _values

pytestmark = pytest.mark.slow

JOB, JOB_SECRET = "spark-job", "job-s3cr3t-Xy9"
SHORT, SHORT_SECRET = "short-job", "short-s3cr3t-Qw7"
#: The life of SHORT's tokens: librdkafka refreshes a token at 80% of its life.
SHORT_LIFETIME_S = 20
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
PROVIDER = "tests.integration.oauth_providers:short_token"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SecuredKafkaCluster]:
    secured = SecuredKafkaCluster(
        oauth_clients={JOB: JOB_SECRET, SHORT: SHORT_SECRET},
        oauth_lifetimes={SHORT: SHORT_LIFETIME_S},
    )
    try:
        secured.start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start fails the module
        pytest.fail(f"The secured Kafka cluster could not start: {exc}", pytrace=False)
    for client in (JOB, SHORT):
        # The executors' consumer groups (never the user's: assign only, no commits).
        secured.grant(f"User:{client}", "group", "spark-kafka-source", "READ", prefixed=True)
    yield secured
    secured.stop()


def _topic(cluster: SecuredKafkaCluster, principal: str, *grants: str) -> str:
    from kafka_direct.testing.broker import create_topic

    name = f"oauth-{uuid.uuid4().hex[:10]}"
    create_topic(cluster.bootstrap_servers, name, partitions=2)
    if grants:
        cluster.grant(f"User:{principal}", "topic", name, *grants)
    return name


def _sign_in(cluster: SecuredKafkaCluster, token: str) -> str:
    """Sign in with ``token`` as it is: "ok" when the broker lets the client in, else the
    broker's authentication error."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    admin = AdminClient({
        "bootstrap.servers": cluster.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token, time.time() + 600, "probe", {}),
        "error_cb": errors.append,
    })  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            return auth[0].str()
        admin.poll(0.5)  # error_cb is served here
        try:
            admin.list_topics(timeout=2)
            return "ok"
        except Exception:  # noqa: BLE001 - not answered yet: the loop waits for the cause
            continue
    return "no answer"


def test_the_broker_checks_each_tokens_signature_issuer_audience_and_expiry(
    cluster: SecuredKafkaCluster,
) -> None:
    from kafka_direct.testing.tokens import TokenIssuer, token_claims

    oidc = cluster.oidc
    assert oidc is not None
    now = time.time()
    claims = token_claims(JOB, now=now, lifetime_s=600, issuer=oidc.issuer,
                          audience=oidc.audience)  # fmt: skip
    kid = oidc.jwks()["keys"][0]["kid"]
    assert _sign_in(cluster, oidc.mint(JOB)) == "ok"
    refused = {
        "another key": TokenIssuer().sign(claims, kid=kid),
        "another issuer": oidc.sign({**claims, "iss": "https://elsewhere"}),
        "another audience": oidc.sign({**claims, "aud": "elsewhere"}),
        # Past Kafka's clock skew allowance (sasl.oauthbearer.clock.skew.seconds, 30 s).
        "expired": oidc.sign({**claims, "exp": int(now) - 120}),
    }
    for why, token in refused.items():
        answer = _sign_in(cluster, token)
        assert "invalid_token" in answer, (why, answer)


def oidc_options(cluster: SecuredKafkaCluster, secret: str = JOB_SECRET) -> dict[str, str]:
    """A Spark job's OAUTHBEARER options, as the Java client takes them."""
    assert cluster.oidc is not None
    return {
        "kafka.bootstrap.servers": cluster.bootstrap("SASL_PLAINTEXT"),
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": (
            f'{OAUTH} required clientId="{JOB}" clientSecret="{secret}" scope="kafka";'
        ),
        "kafka.sasl.oauthbearer.token.endpoint.url": cluster.oidc.token_url,
        "kafka.sasl.login.callback.handler.class": OIDC_HANDLER,
    }


def test_oauthbearer_jaas_reads_and_writes_exactly(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    assert cluster.oidc is not None
    source = _topic(cluster, JOB, "READ", "DESCRIBE")
    out = _topic(cluster, JOB, "WRITE", "DESCRIBE")
    values = _produce(cluster, source, 200, "oidc")
    issued = cluster.oidc.tokens_issued
    options = oidc_options(cluster)
    df = spark.read.format("kafka_direct").options(**options).option("subscribe", source).load()
    assert _values(df) == values
    df.select("value").write.format("kafka_direct").mode("append").options(**options).option(
        "topic", out
    ).save()
    assert sorted(_read_back(cluster, out, 200)) == values
    # The broker let the job in on tokens from the kit's endpoint, not some other way.
    assert cluster.oidc.tokens_issued > issued


def test_a_wrong_client_secret_fails_fast_and_says_so(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    source = _topic(cluster, JOB, "READ", "DESCRIBE")
    _produce(cluster, source, 10, "denied")
    options = oidc_options(cluster, secret="wr0ng-s3cr3t-Zz1")
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark wraps the library's error
        spark.read.format("kafka_direct").options(**options).option(
            "subscribe", source
        ).load().count()
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "OAUTHBEARER token" in message and "invalid_client" in message, message
    assert "clientSecret" in message, message
    assert "wr0ng-s3cr3t-Zz1" not in message and JOB_SECRET not in message


def provider_options(cluster: SecuredKafkaCluster, provider: str = PROVIDER) -> dict[str, str]:
    """A job that signs in with a token function, as with Amazon MSK IAM or Microsoft Entra."""
    assert cluster.oidc is not None
    providers.configure(cluster.oidc.token_url, SHORT, SHORT_SECRET)
    return {
        "kafka.bootstrap.servers": cluster.bootstrap("SASL_PLAINTEXT"),
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "oauthProvider": provider,
    }


def test_a_token_function_reads_and_writes_exactly(
    spark: Any, cluster: SecuredKafkaCluster
) -> None:
    from kafka_direct import KafkaUtils, OffsetRange

    source = _topic(cluster, SHORT, "READ", "DESCRIBE")
    out = _topic(cluster, SHORT, "WRITE", "DESCRIBE")
    values = _produce(cluster, source, 150, "token")
    options = provider_options(cluster)
    df = spark.read.format("kafka_direct").options(**options).option("subscribe", source).load()
    assert _values(df) == values
    df.select("value").write.format("kafka_direct").mode("append").options(**options).option(
        "topic", out
    ).save()
    assert sorted(_read_back(cluster, out, 150)) == values
    # The DStream API takes it in kafkaParams.
    params = {k.removeprefix("kafka."): v for k, v in options.items()}
    ranges = [OffsetRange(source, p, 0, 75) for p in range(2)]
    assert _values(KafkaUtils.createRDD(spark, params, ranges)) == values
    # Spark's Python workers (driver side and executors) called it; the test process did not
    # make a client with it.
    assert {pid for pid, _ in providers.calls()} - {os.getpid()}


def test_librdkafka_refreshes_a_token_function_before_it_expires(
    cluster: SecuredKafkaCluster,
) -> None:
    from kafka_direct.config.reader import kafka_params
    from kafka_direct.kafka.admin import new_admin_client

    options = provider_options(cluster)
    config = kafka_params(
        {"bootstrap.servers": options["kafka.bootstrap.servers"],
         "security.protocol": "SASL_PLAINTEXT"},
        owned={}, owner="source", oauth_provider=PROVIDER,
    )  # fmt: skip
    admin = new_admin_client(config)
    assert admin.list_topics(timeout=30).topics is not None

    def mine() -> int:
        return sum(1 for pid, _ in providers.calls() if pid == os.getpid())

    first = mine()  # the check of the option, and the client's first token
    # librdkafka asks again at 80% of the token's life (16 s here); the deadline only bounds
    # a hang.
    deadline = time.monotonic() + 6 * SHORT_LIFETIME_S
    while mine() == first and time.monotonic() < deadline:
        admin.poll(1.0)
    assert mine() > first, "the token was never refreshed"
    # The client still works on its refreshed token, on a fresh topic it has never seen.
    topic = _topic(cluster, SHORT, "DESCRIBE")
    assert topic in admin.list_topics(topic, timeout=30).topics


@pytest.mark.parametrize(
    ("provider", "phrase"),
    [
        pytest.param("tests.integration.no_such_module:token", "importing", id="unimportable"),
        pytest.param("tests.integration.oauth_providers:NOT_A_FUNCTION", "a function",
                     id="not callable"),
        pytest.param("tests.integration.oauth_providers:milliseconds_token", "divided by 1000",
                     id="milliseconds"),
    ],
)  # fmt: skip
def test_a_broken_token_function_is_refused_before_the_query_starts(
    spark: Any, cluster: SecuredKafkaCluster, provider: str, phrase: str
) -> None:
    options = provider_options(cluster, provider)
    with pytest.raises(Exception) as info:  # Spark wraps the library's error
        spark.read.format("kafka_direct").options(**options).option("subscribe", "t").load()
    message = str(info.value)
    assert "Invalid option 'oauthProvider'" in message and provider in message, message
    assert phrase in message.lower() or phrase in message, message
    assert SHORT_SECRET not in message and "eyJ" not in message  # no secret, no token (JWT)
