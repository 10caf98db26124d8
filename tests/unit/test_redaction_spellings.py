"""kafka_direct.redaction beyond the key's exact spelling: a secret key in another style
(``user_info``, ``userInfo``, ``user-info``) under another client's prefix, URL user info in a
shown value, and the :class:`Scrubber` that takes a client's secret values out of librdkafka's
text. Table-style, pure: no client, no broker.

Review: ``confluent.schema.registry.basic.auth.user_info`` = 'sruser:SRPASS' was echoed whole,
because the prefix put every secret key out of reach of the near-miss check.
"""

from __future__ import annotations

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.redaction import REDACTED, Scrubber, config_scrubber, is_secret, shown

PREFIX = "confluent.schema.registry."


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        (f"{PREFIX}basic.auth.user_info", True),
        (f"{PREFIX}basic.auth.userinfo", True),
        (f"{PREFIX}basic.auth.userInfo", True),
        (f"{PREFIX}basic.auth.user-info", True),
        (f"{PREFIX}basicAuthUserInfo", True),
        (f"{PREFIX}bearer_auth_token", True),
        (f"{PREFIX}ssl.keyPassword", True),
        ("schema.registry.basic.auth.user.info", True),
        ("kafka.sasl_password", True),
        ("spark.ssl.keyStorePassword", True),
        # harmless options stay shown, whatever their style
        (f"{PREFIX}ssl.ca.location", False),
        (f"{PREFIX}timeout.ms", False),
        (f"{PREFIX}basic_auth_credentials_sourc", True),  # "credential" is secret anywhere
        ("isKey", False),  # "is.key" is two edits from "ssl.key": not near enough
        ("schemaRegistryAddress", False),
        ("subjectNameStrategy", False),
        ("maxOffsetsPerTrigger", False),
        ("kafka.log_level", False),
    ],
)
def test_a_secret_key_is_secret_in_any_spelling(key: str, secret: bool) -> None:
    assert is_secret(key) is secret


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://sruser:SRPASS@registry:8081", "https://<redacted>@registry:8081"),
        ("https://u:p@ss@registry/x", "https://<redacted>@registry/x"),
        ("http://registry:8081/a@b", "http://registry:8081/a@b"),  # an '@' in the path
        ("ops@example.com", "ops@example.com"),  # no URL, no user info
        ("earliest", "earliest"),
    ],
)
def test_a_shown_value_never_carries_url_user_info(value: str, expected: str) -> None:
    assert shown("startingOffsets", value) == expected
    err = ConfigurationError("startingOffsets", value, f"not {value}")
    assert "SRPASS" not in str(err) and "p@ss" not in str(err)


@pytest.mark.parametrize(
    ("values", "text", "expected"),
    [
        (["URLSECRET-1"], "from URLSECRET-1 and URLSECRET-1", f"from {REDACTED} and {REDACTED}"),
        ([" padded-secret\n"], 'got "padded-secret"', f'got "{REDACTED}"'),
        # short values only where quoted: every "ab" of the text would otherwise go
        (["ab"], "about 'ab' and \"ab\"", f"about '{REDACTED}' and \"{REDACTED}\""),
        (["long-secret", "long"], "a long-secret, long", f"a {REDACTED}, {REDACTED}"),
        ([], "nothing to hide", "nothing to hide"),
        (["", "  "], "nothing to hide", "nothing to hide"),
    ],
)
def test_scrubber(values: list[str], text: str, expected: str) -> None:
    scrub = Scrubber(values)
    assert scrub(text) == expected
    assert bool(scrub) is any(v.strip() for v in values)
    assert all(v.strip() not in repr(scrub) for v in values if v.strip())


@pytest.mark.parametrize(
    ("config", "line", "hidden", "kept"),
    [
        (
            {"sasl.oauthbearer.token.endpoint.url": "https://idp.example/token?code=URLSECRET"},
            'Failed to retrieve OIDC token from "https://idp.example/token?code=URLSECRET": 404',
            "URLSECRET",
            "Failed to retrieve OIDC token from",
        ),
        (
            # librdkafka quotes the rest of the config from the pair it does not know
            {"sasl.oauthbearer.config": "principal=alice bogus=S3CRET scope=a,b lifeSeconds=60"},
            "Unrecognized sasl.oauthbearer.config beginning at: bogus=S3CRET scope=a,b",
            "S3CRET",
            "beginning at: ",
        ),
        (
            {"sasl.oauthbearer.config": 'principal=al"SECRETPRINCIPAL'},
            "'\"' cannot appear in principal: al\"SECRETPRINCIPAL",
            "SECRETPRINCIPAL",
            "cannot appear in principal",
        ),
        (
            {"sasl.password": "pw-SECRET", "bootstrap.servers": "broker:9092"},
            "broker:9092/bootstrap: Connect to broker:9092 failed with pw-SECRET",
            "pw-SECRET",
            "broker:9092/bootstrap",  # values of harmless keys are not scrubbed
        ),
        (
            # a number alone in a secret config is no secret, and would garble every line
            {"sasl.oauthbearer.config": "principal=alice lifeSeconds=3600"},
            "token refresh in 3600 ms",
            "lifeSeconds",
            "token refresh in 3600 ms",
        ),
    ],
)
def test_config_scrubber(config: dict[str, str], line: str, hidden: str, kept: str) -> None:
    scrub = config_scrubber(config)
    assert hidden not in scrub(line)
    assert kept in scrub(line)


def test_the_oauthbearer_method_and_scope_stay_readable_in_librdkafkas_text() -> None:
    # Hidden when shown as settings, but 'oidc' or a scope scrubbed from every log line would
    # garble them; the client secret is still scrubbed.
    scrub = config_scrubber(
        {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.scope": "kafka",
            "sasl.oauthbearer.client.secret": "TOPSECRET",
        }
    )
    assert scrub("method oidc, scope kafka, secret TOPSECRET") == (
        f"method oidc, scope kafka, secret {REDACTED}"
    )
