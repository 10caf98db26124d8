"""Consumer-group lag: the ``kafka-consumer-groups --describe`` view (CURRENT-OFFSET,
LOG-END-OFFSET, LAG). Runs in the user's process (the CLI) and the Spark driver."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafka_direct.config.kafka import KafkaConfig, Subscription
from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.kafka.offset_reader import AdminOffsetReader

__all__ = ["LagRow", "group_lag"]


@dataclass(frozen=True)
class LagRow:
    """One line of ``kafka-consumer-groups --describe``."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int

    @property
    def lag(self) -> int | None:
        if self.current_offset is None:
            return None
        return max(0, self.log_end_offset - self.current_offset)


def group_lag(
    kafka: Mapping[str, str],
    group: str,
    topics: Iterable[str] | None = None,
    *,
    timeout_s: float = 30.0,
) -> list[LagRow]:
    """CURRENT-OFFSET, LOG-END-OFFSET and LAG per partition, for the group's topics.

    ``topics`` adds partitions the group has not committed yet (shown with no current offset).
    """

    reader = AdminOffsetReader(
        KafkaConfig(kafka), request_timeout_s=timeout_s, connect_timeout_s=min(10.0, timeout_s)
    )
    reader.connect()  # a wrong address fails here, in seconds, with the cause
    committed = fetch_group_offsets(kafka, group, timeout_s=timeout_s, admin=reader.admin)
    tps = set(committed)
    if topics:
        names = tuple(topics)
        tps |= reader.partitions(Subscription("subscribe", topics=names))
    ends = reader.latest(tps)
    return [
        LagRow(tp.topic, tp.partition, committed.get(tp), ends[tp])
        for tp in sorted(tps)
        if tp in ends
    ]
