"""The exactly-once sink's check that its marker topic exists (kafka_direct.source.sink): a topic
created a moment before the write may be missing from the first metadata answer, and is asked
for again before the write is refused. A stand-in admin client; no broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kafka_direct.source import sink


class Admin:
    """Answers metadata without ``topic`` for the first ``late`` requests, then with it."""

    def __init__(self, topic: str, late: int) -> None:
        self.topic, self.late, self.asked = topic, late, 0

    def list_topics(self, **kwargs: Any) -> Any:
        assert "topic" not in kwargs  # never by name: that may create it
        self.asked += 1
        listed = {self.topic: object()} if self.asked > self.late else {}
        return SimpleNamespace(topics=listed)


def test_a_topic_the_first_answer_lacks_is_found_when_asked_again() -> None:
    admin = Admin("t", late=2)
    assert sink._topic_listed(admin, admin.list_topics(timeout=1), "t")
    assert admin.asked == 3


def test_a_topic_that_stays_missing_is_missing_within_the_settle_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sink, "TOPIC_SETTLE_S", 0.5)
    admin = Admin("t", late=10**6)
    assert not sink._topic_listed(admin, admin.list_topics(timeout=1), "t")
    assert 2 <= admin.asked <= 4
