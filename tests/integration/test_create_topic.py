"""``kafka_direct.testing.create_topic`` returns a topic that can be written at once.

On a KRaft broker, metadata lists a new topic's partitions a moment before their leader serves
them: with the wait below removed, this test found 97 of 100 partitions unserved (Apache Kafka
4.1.1). Spark's own sink, writing into such a topic, lost a partition's first batch to
KAFKA-15591 (see ``kafka_direct/testing/topics.py``). Every test, benchmark and demo creates its
topics with this helper, so it must wait for the leaders too.
"""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_direct.testing.broker import create_topic

PARTITIONS = 100


def test_every_partition_of_a_new_topic_is_served_when_create_topic_returns(
    kafka_bootstrap: str,
) -> None:
    topic = f"create-topic-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)

    # Asked once, at once, with no retry: a partition whose leader is not serving it yet answers
    # NOT_LEADER_OR_FOLLOWER here.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(
        {TopicPartition(topic, p): latest for p in range(PARTITIONS)}, request_timeout=30
    )
    answers: dict[int, object] = {}
    for tp, future in futures.items():
        try:
            answers[tp.partition] = future.result().offset
        except KafkaException as exc:
            answers[tp.partition] = exc.args[0].name()
    unserved = {p: a for p, a in answers.items() if a != 0}
    assert not unserved, f"{len(unserved)} of {PARTITIONS} partitions not served: {unserved}"
    assert sorted(answers) == list(range(PARTITIONS))
