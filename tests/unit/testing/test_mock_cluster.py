"""MockCluster without a cluster: the C signatures it declares and its errors before start()."""

from __future__ import annotations

import pytest

from kafka_direct.errors import EmbeddedBrokerError
from kafka_direct.testing import mock_cluster
from kafka_direct.testing.mock_cluster import MockCluster


def test_every_declared_function_is_exported_by_confluent_kafkas_librdkafka() -> None:
    # A confluent-kafka upgrade that drops or renames a mock function fails here, not in a
    # fault test halfway through.
    lib = mock_cluster._library()
    for name, (restype, argtypes) in mock_cluster._SIGNATURES.items():
        function = getattr(lib, name)
        assert function.restype is restype, name
        assert function.argtypes == argtypes, name


def test_a_cluster_needs_a_broker() -> None:
    with pytest.raises(ValueError, match="at least one broker, got brokers=0"):
        MockCluster(brokers=0)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c.broker_down(1), "rd_kafka_mock_broker_set_down"),
        (lambda c: c.delete_records("t", 0, 1), "rd_kafka_mock_partition_delete_records"),
        (lambda c: c.push_request_errors(1, 6), "rd_kafka_mock_push_request_errors_array"),
        (lambda c: c.bootstrap_servers, "call start"),
    ],
)
def test_calls_before_start_name_what_was_called(call, name) -> None:
    cluster = MockCluster()
    with pytest.raises(EmbeddedBrokerError, match=name):
        call(cluster)
    cluster.close()  # closing a cluster that never started does nothing
