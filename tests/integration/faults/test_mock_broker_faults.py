"""Brokers that go down, leaders that move and requests that fail, under a running stream
(librdkafka's mock cluster): the stream rides them out and reads every record exactly once."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError

from kafka_direct.testing import ApiKey
from tests.integration.faults.support import KnownProducer, exact_through_fault, leaders

OUTAGE_S = 10.0
MOVES = 12


def test_regression_ten_second_outage_killed_the_stream(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=3)
    down = mock_topics.leader(0)

    def outage() -> None:
        mock_cluster.broker_down(down)
        time.sleep(OUTAGE_S)
        mock_cluster.broker_up(down)

    exact_through_fault(
        outage,
        producer=KnownProducer(mock_cluster.bootstrap_servers, topic),
        partitions=3,
        make_stream=lambda: mock_stream(topic),
        track=queries,
        checkpoint=tmp_path / "ck",
    )


def test_leader_moves_mid_stream_lose_and_repeat_nothing(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=3)

    def move_leaders() -> None:
        # Every partition moves on to the next broker, every half second, for six seconds: each
        # move leaves clients with a stale leader until they refresh their metadata.
        for move in range(1, MOVES + 1):
            for p in range(3):
                mock_cluster.set_leader(topic, p, (mock_topics.leader(p) + move - 1) % 3 + 1)
            time.sleep(0.5)

    exact_through_fault(
        move_leaders,
        producer=KnownProducer(mock_cluster.bootstrap_servers, topic),
        partitions=3,
        make_stream=lambda: mock_stream(topic),
        track=queries,
        checkpoint=tmp_path / "ck",
    )
    assert leaders(mock_cluster.bootstrap_servers, topic) == {
        p: (mock_topics.leader(p) + MOVES - 1) % 3 + 1 for p in range(3)
    }


def test_retriable_list_offsets_errors_are_ridden_out(
    mock_cluster, mock_topics, mock_stream, queries, tmp_path
):
    topic = mock_topics.create(partitions=3)

    def failing_requests() -> None:
        # The next ListOffsets requests, to any broker, answer with leadership errors: more of
        # them than one trigger's attempts ('fetchOffset.numRetries', 3) absorb.
        mock_cluster.push_request_errors(
            ApiKey.LIST_OFFSETS,
            *[KafkaError.NOT_LEADER_FOR_PARTITION] * 4,
            *[KafkaError.LEADER_NOT_AVAILABLE] * 4,
        )
        time.sleep(3)

    exact_through_fault(
        failing_requests,
        producer=KnownProducer(mock_cluster.bootstrap_servers, topic),
        partitions=3,
        make_stream=lambda: mock_stream(topic),
        track=queries,
        checkpoint=tmp_path / "ck",
    )
