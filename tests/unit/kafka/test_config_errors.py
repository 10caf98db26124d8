"""librdkafka's refusals of TLS and SASL settings at client creation, as
kafka_direct.kafka.translate.config_error words them: the option the user set, never "the
installed librdkafka may be too old". The refusals are librdkafka's own (a client is created,
no broker is needed)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from kafka_direct.kafka.translate import config_error

NOT_A_CERTIFICATE = "-----BEGIN CERTIFICATE-----\nbm90IHJlYWQ=\n-----END CERTIFICATE-----\n"


def _refusal(settings: dict[str, str]) -> KafkaException:
    with pytest.raises(KafkaException) as info:
        Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, **settings})
    return info.value


@pytest.mark.parametrize(
    ("settings", "prefix", "option", "says"),
    [
        pytest.param({"security.protocol": "SSL", "ssl.ca.pem": NOT_A_CERTIFICATE}, "kafka.",
                     "kafka.ssl.ca.pem", "kafka.ssl.truststore.location",
                     id="a truststore's certificates librdkafka cannot read"),
        pytest.param({"security.protocol": "SSL", "ssl.certificate.pem": NOT_A_CERTIFICATE,
                      "ssl.key.pem": "x"}, "",
                     "ssl.certificate.pem", "made ssl.certificate.pem from ssl.keystore.location",
                     id="a keystore's chain librdkafka cannot read (kafkaParams)"),
        pytest.param({"security.protocol": "SASL_SSL"}, "kafka.", "kafka.sasl.mechanism",
                     "GSSAPI (Kerberos)", id="SASL without a mechanism: GSSAPI, not built in"),
    ],
)  # fmt: skip
def test_a_refused_tls_or_sasl_setting_is_named(
    settings: dict[str, str], prefix: str, option: str, says: str
) -> None:
    refused = config_error(_refusal(settings), settings, prefix=prefix)
    assert refused is not None
    assert refused.option == option, str(refused)
    assert says in str(refused)
    assert "may be too old" not in str(refused)
    assert "bm90IHJlYWQ" not in str(refused)
