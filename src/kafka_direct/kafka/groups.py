"""Consumer-group offsets in Kafka (``__consumer_offsets``): read and commit. Runs in the Spark
driver (the stream runner's ``commit``, the direct stream) and the user's process (CLI, stores).

This is where Spark's ``commitAsync`` lands: offsets committed here are what
``kafka-consumer-groups --describe`` and every lag monitor read. Committing uses the AdminClient
(``alter_consumer_group_offsets``), so no consumer joins the group; Kafka refuses it while the
group has active members, which protects a group that some other application is consuming with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.errors import KafkaClientError, NotAuthorizedError
from kafka_direct.kafka.access import check_group
from kafka_direct.kafka.admin import new_admin_client
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.offsets import PartitionOffsets, TopicPartition

__all__ = ["GroupCommitter", "commit_group_offsets", "fetch_group_offsets"]

log = logging.getLogger(__name__)

#: librdkafka's OFFSET_INVALID: the group has no committed offset for the partition.
_NO_OFFSET = -1001
#: Group-coordinator answers that pass by waiting.
_COORDINATOR_BUSY = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}
_COORDINATOR_RETRY_S = 0.2


def fetch_group_offsets(
    kafka: Mapping[str, str],
    group: str,
    tps: Iterable[TopicPartition] | None = None,
    *,
    timeout_s: float = 30.0,
    admin: Any = None,
) -> PartitionOffsets:
    """The group's committed offsets (next offset to read); partitions without one are left out.

    ``tps=None`` asks for every partition the group has committed.
    """
    admin = admin or new_admin_client(kafka)
    wanted = None if tps is None else [CkTopicPartition(tp.topic, tp.partition) for tp in tps]
    request = [ConsumerGroupTopicPartitions(group, wanted)]
    context = f"Fetching committed offsets of group '{group}'"
    access = Access(kafka, group=group, group_operations="DESCRIBE")
    deadline = time.monotonic() + timeout_s
    while True:
        with kafka_errors(context, access=access):
            futures = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)
        try:
            result = futures[group].result(timeout=timeout_s + 5)
            break
        except (KafkaException, FutureTimeout) as exc:
            error = translate(exc, context, access=access)
            # A coordinator that is still loading __consumer_offsets (the first group request
            # of a fresh cluster, or after a coordinator moved) answers this: Kafka's own
            # clients wait it out, and librdkafka leaves it to the caller here.
            if error.code not in _COORDINATOR_BUSY or time.monotonic() >= deadline:
                raise error from exc
            log.info("%s: %s; retrying", context, error.code)
            time.sleep(_COORDINATOR_RETRY_S)
    out: PartitionOffsets = {}
    for ck in result.topic_partitions or []:
        if ck.error is None and ck.offset >= 0 and ck.offset != _NO_OFFSET:
            out[TopicPartition(ck.topic, ck.partition)] = int(ck.offset)
    return out


def commit_group_offsets(
    kafka: Mapping[str, str],
    group: str,
    offsets: Mapping[TopicPartition, int],
    *,
    timeout_s: float = 30.0,
    admin: Any = None,
) -> None:
    """Commit ``offsets`` (next offset to read, per partition) for ``group``.

    Raises :class:`~kafka_direct.errors.KafkaClientError` on failure; callers that must never
    fail (the streaming source) catch, log and retry.
    """
    if not offsets:
        return
    admin = admin or new_admin_client(kafka)
    tps = [
        CkTopicPartition(tp.topic, tp.partition, int(off)) for tp, off in sorted(offsets.items())
    ]
    context = f"Committing offsets of group '{group}'"
    access = Access(kafka, topics=sorted({tp.topic for tp in offsets}), group=group)
    with kafka_errors(context, access=access):
        futures = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=timeout_s
        )
    try:
        result = futures[group].result(timeout=timeout_s + 5)
    except (KafkaException, FutureTimeout) as exc:
        raise translate(exc, context, access=access) from exc
    for ck in result.topic_partitions or []:
        if ck.error is not None:
            raise translate(ck.error, f"{context} for {ck.topic}-{ck.partition}", access=access)


class GroupCommitter:
    """Commits a stream's finished offsets to a group. Never raises: a failed commit is logged
    and retried later, with a growing pause, so a refused or unreachable group does not slow
    every trigger down; the next success carries the newest offsets anyway.

    Lives in the driver's stream-runner process; the admin client is lazy and not pickled.
    """

    def __init__(
        self,
        kafka: Mapping[str, str],
        group: str,
        *,
        timeout_s: float = 10.0,
        min_backoff_s: float = 5.0,
        max_backoff_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kafka = KafkaConfig(kafka)  # redacts secrets in any repr
        self.group = group
        self.timeout_s = timeout_s
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self.last_committed: PartitionOffsets = {}
        self.failures = 0
        self._retry_at = 0.0
        self._admin: Any = None
        self._checked = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None
        return state

    def __repr__(self) -> str:
        return f"GroupCommitter(group={self.group!r})"

    def check(self) -> None:
        """Once per process: raise :class:`NotAuthorizedError` if the principal may not commit
        to the group (READ), before any batch runs, rather than warn at every commit."""
        if self._checked:
            return
        if self._admin is None:
            self._admin = new_admin_client(self.kafka)
        with kafka_errors(f"Checking the rights on group '{self.group}'"):
            check_group(
                self._admin, self.kafka, self.group,
                what="commitOffsetsToGroup commits the query's offsets", timeout_s=self.timeout_s,
            )  # fmt: skip
        self._checked = True

    def commit(self, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit ``offsets`` unless backing off after a failure; True when the broker accepted.
        A refusal by Kafka's authorizer raises: waiting cannot fix it."""
        now = self._clock()
        if now < self._retry_at:
            return False
        try:
            if self._admin is None:
                self._admin = new_admin_client(self.kafka)
            commit_group_offsets(
                self.kafka, self.group, offsets, timeout_s=self.timeout_s, admin=self._admin
            )
        except NotAuthorizedError:
            raise
        except KafkaClientError as exc:
            # A group with active members refuses commits from outside; so does a broker that is
            # down. Neither may fail the query: back off, and commit newer offsets later.
            self.failures += 1
            backoff = min(self.max_backoff_s, self.min_backoff_s * 2 ** (self.failures - 1))
            self._retry_at = now + backoff
            self._admin = None
            log.warning(
                "Committing offsets to group '%s' failed (%d in a row); retrying in %.0f s: %s",
                self.group,
                self.failures,
                backoff,
                exc,
            )
            return False
        self.failures = 0
        self._retry_at = 0.0
        self.last_committed = dict(offsets)
        log.info("Committed offsets of %d partition(s) to group '%s'", len(offsets), self.group)
        return True
