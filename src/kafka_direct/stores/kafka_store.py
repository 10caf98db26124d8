"""Offsets in a Kafka consumer group (``__consumer_offsets``). Runs in the Spark driver (the
direct stream's ``offsetStore=``, ``foreachBatch`` functions) and in the user's process (CLI).

Where Spark's ``commitAsync`` commits: offsets stored here are what ``kafka-consumer-groups
--describe`` and every lag monitor show. A Kafka commit cannot join your database's transaction,
so this store gives at-least-once output (commit after the output is written), not exactly-once;
for that, keep offsets with the results in :class:`~kafka_direct.stores.SqlOffsetStore`.

confluent-kafka is imported on first use, so importing the stores stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct.config.kafka import KafkaConfig, redact
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.stores.base import OffsetStore, ends_of

__all__ = ["KafkaGroupStore"]


class KafkaGroupStore(OffsetStore):
    """:class:`OffsetStore` over Kafka consumer groups, through the AdminClient.

    ``kafka_config`` holds librdkafka keys (``bootstrap.servers``, ``security.protocol``...);
    source-style ``kafka.``-prefixed keys are accepted too. No consumer joins the group, and
    Kafka refuses a commit while the group has active members (another application consuming
    with it): that error is raised as :class:`~kafka_direct.errors.KafkaClientError`.
    """

    def __init__(self, kafka_config: Mapping[str, str], *, timeout_s: float = 30.0) -> None:
        config = {
            (k[len("kafka.") :] if k.startswith("kafka.") else k): str(v)
            for k, v in kafka_config.items()
        }
        if not config.get("bootstrap.servers"):
            raise ConfigurationError(
                "bootstrap.servers",
                None,
                "the Kafka cluster's 'host:port' list in kafka_config",
                "Pass {'bootstrap.servers': 'broker1:9092'}.",
            )
        self.kafka_config = KafkaConfig(config)
        self._timeout_s = timeout_s
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        """The AdminClient, created on first use (and never pickled)."""
        if self._admin is None:
            from kafka_direct.kafka.admin import new_admin_client

            self._admin = new_admin_client(self.kafka_config)
        return self._admin

    def load(self, group: str, tps: Iterable[TopicPartition] | None = None) -> PartitionOffsets:
        wanted = None if tps is None else list(tps)
        if wanted is not None and not wanted:
            return {}
        from kafka_direct.kafka.groups import fetch_group_offsets

        return fetch_group_offsets(
            self.kafka_config, group, wanted, timeout_s=self._timeout_s, admin=self.admin
        )

    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        """Commit the highest ``untilOffset`` per partition to the group (overwriting)."""
        from kafka_direct.kafka.groups import commit_group_offsets

        commit_group_offsets(
            self.kafka_config, group, ends_of(ranges), timeout_s=self._timeout_s, admin=self.admin
        )

    def check_access(self, group: str) -> None:
        """Raise :class:`~kafka_direct.errors.NotAuthorizedError` if the principal may not
        READ ``group`` (commit to it), naming the group; no-op for PLAINTEXT clients."""
        from kafka_direct.kafka.access import check_group
        from kafka_direct.kafka.translate import kafka_errors

        with kafka_errors(f"Checking the rights on group '{group}'"):
            check_group(
                self.admin, self.kafka_config, group,
                what="the stream's offsets are committed to this group", timeout_s=self._timeout_s,
            )  # fmt: skip

    def __enter__(self) -> KafkaGroupStore:
        return self

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference frees librdkafka's handle.
        self._admin = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # a live client never crosses a process boundary
        return state

    def __repr__(self) -> str:
        shown = redact(dict(self.kafka_config))
        return f"KafkaGroupStore({shown!r})"
