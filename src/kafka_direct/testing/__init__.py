"""Test helpers for Kafka and Spark faults, for kafka_direct's own suite and for users' tests.

Plain library: runs in the user's test process. Each helper starts real parts on loopback and
stops them (context managers, also cleaned up at interpreter exit):

- :class:`KafkaCluster`: real Apache Kafka 4.x brokers (KRaft) as JVM processes, from Maven
  Central jars fetched once with PySpark's Ivy (:func:`fetch_maven_jars`); the broker of record
  for kafka_direct's own suite. Brokers can be killed, restarted and paused.
- :class:`SecuredKafkaCluster`: the same with SASL (PLAIN, SCRAM, and OAUTHBEARER validated by
  the broker against the kit's OIDC provider, :mod:`kafka_direct.testing.oidc`), TLS and SSL
  listeners, its own CA, and an authorizer with ACLs (``grant``, ``revoke``, ``add_user``,
  ``truststore``).
- :class:`MockCluster`: librdkafka's mock cluster, for broker faults Tansu cannot produce
  (brokers down, leader moves, slow brokers, injected request errors, deleted records).
- :class:`DurableBroker`: the embedded Tansu broker on S3 storage (a local moto server), so it
  can be SIGKILLed and restarted without losing a record. Needs ``moto[server]``.
- :class:`SchemaRegistry`: a real Confluent-compatible Schema Registry (Apicurio Registry 3,
  in-memory, from Maven Central; needs Java 21+), for ``from_avro`` / ``to_avro``.
- :class:`StandaloneCluster`: a Spark standalone master and workers from the installed PySpark,
  so executors are separate JVMs that can be killed.

For the in-memory embedded broker see :mod:`kafka_direct.testing.broker`; for a ``local[N]``
session, :mod:`kafka_direct.testing.local`.
"""

from __future__ import annotations

from kafka_direct.testing.durable_broker import DurableBroker
from kafka_direct.testing.jars import JarFetchError, fetch_maven_jars
from kafka_direct.testing.kafka_cluster import KafkaCluster, KafkaClusterError
from kafka_direct.testing.mock_cluster import ApiKey, MockCluster
from kafka_direct.testing.schema_registry import SchemaRegistry
from kafka_direct.testing.secured_cluster import SecuredKafkaCluster
from kafka_direct.testing.standalone import StandaloneCluster

__all__ = [
    "ApiKey",
    "DurableBroker",
    "JarFetchError",
    "KafkaCluster",
    "KafkaClusterError",
    "MockCluster",
    "SchemaRegistry",
    "SecuredKafkaCluster",
    "StandaloneCluster",
    "fetch_maven_jars",
]
