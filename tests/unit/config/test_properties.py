"""``--command-config``: Java's properties format, parsed as ``java.util.Properties.load`` does,
then translated like a Spark job's ``kafka.*`` options (kafka_direct.config.properties)."""

from __future__ import annotations

import pytest

from kafka_direct.config.properties import client_properties, parse_properties
from kafka_direct.errors import ConfigurationError

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="svc" password="s3cr3t-pw";'
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a=1\nb=2\n", {"a": "1", "b": "2"}, id="key=value"),
        pytest.param("a: 1\nb 2\n", {"a": "1", "b": "2"}, id="colon and blank separators"),
        pytest.param("  a =  1  \n", {"a": "1  "}, id="blanks around the separator only"),
        pytest.param("# c\n! c\n\n   \na=1", {"a": "1"}, id="comments and blank lines"),
        pytest.param("a=x#y\n", {"a": "x#y"}, id="# inside a value"),
        pytest.param("a=1\na=2\n", {"a": "2"}, id="the last value wins"),
        pytest.param("a=\n", {"a": ""}, id="empty value"),
        pytest.param("a\n", {"a": ""}, id="key alone"),
        pytest.param("a=one \\\n    two\n", {"a": "one two"}, id="continuation"),
        pytest.param("a=x\\\\\nb=y\n", {"a": "x\\", "b": "y"}, id="\\\\ ends no line"),
        pytest.param("a=\\t\\n\\u00e9\\=\n", {"a": "\t\né="}, id="escapes"),
        pytest.param("k\\=ey=v\n", {"k=ey": "v"}, id="escaped separator in a key"),
        pytest.param("a=C:\\\\store.jks\n", {"a": "C:\\store.jks"}, id="windows path"),
        pytest.param("a=1\r\nb=2\r\n", {"a": "1", "b": "2"}, id="CRLF"),
        pytest.param(f"sasl.jaas.config={JAAS}\n", {"sasl.jaas.config": JAAS}, id="JAAS line"),
    ],
)
def test_java_properties_are_parsed_as_java_does(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_a_bad_unicode_escape_names_the_file_and_not_the_line() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_properties("sasl.password=\\uZZZZs3cr3t\n", source="--command-config c.props")
    message = str(info.value)
    assert "--command-config c.props" in message and "four hex digits" in message
    assert "s3cr3t" not in message


@pytest.mark.parametrize(
    ("text", "bootstrap", "expected"),
    [
        pytest.param(
            f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={JAAS}\n",
            "b:9093",
            {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "svc",
             "sasl.password": "s3cr3t-pw"},
            id="a JAAS line becomes librdkafka's username and password",
        ),
        pytest.param(
            "bootstrap.servers=file:9092\nssl.endpoint.identification.algorithm=\n",
            None,
            {"bootstrap.servers": "file:9092", "ssl.endpoint.identification.algorithm": "none"},
            id="the file's bootstrap servers; no hostname check",
        ),
        pytest.param(
            "bootstrap.servers=file:9092\n", "flag:9092", {"bootstrap.servers": "flag:9092"},
            id="--bootstrap-servers wins",
        ),
    ],
)  # fmt: skip
def test_client_properties_are_translated_as_a_spark_jobs_options(
    text: str, bootstrap: str | None, expected: dict[str, str]
) -> None:
    got = client_properties(text, source="--command-config c", bootstrap_servers=bootstrap)
    assert dict(got) == expected


@pytest.mark.parametrize(
    ("text", "option"),
    [
        pytest.param("security.protocol=SSL\n", "bootstrap.servers", id="no bootstrap servers"),
        pytest.param(
            "bootstrap.servers=b:1\nsecurity.protocol=SASL_SSL\n"
            'sasl.jaas.config=com.example.Custom required password="s3cr3t-pw";\n',
            "sasl.jaas.config",
            id="a login module librdkafka cannot run",
        ),
    ],
)
def test_what_cannot_be_translated_is_refused_naming_the_key(text: str, option: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        client_properties(text, source="--command-config c")
    assert info.value.option == option
    assert "s3cr3t-pw" not in str(info.value)
