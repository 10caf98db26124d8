"""The KRaft cluster id KafkaCluster formats its nodes with."""

from __future__ import annotations

import uuid
from base64 import urlsafe_b64decode

import pytest

from kafka_direct.testing import kafka_cluster


def test_a_cluster_id_is_kafkas_uuid_form() -> None:
    cluster_id = kafka_cluster._cluster_id()
    assert len(cluster_id) == 22
    assert len(urlsafe_b64decode(cluster_id + "==")) == 16


def test_an_id_that_would_start_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 encodes as '-' first: kafka-storage would read '-t -...' as a missing argument.
    draws = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kafka_cluster.uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka_cluster._cluster_id()
    assert not cluster_id.startswith("-")
    assert urlsafe_b64decode(cluster_id + "==") == b"\x01" * 16
