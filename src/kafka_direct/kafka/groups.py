"""Consumer-group offsets in Kafka (``__consumer_offsets``): read and commit. Runs in the Spark
driver (the stream runner's ``commit``, the direct stream) and the user's process (CLI, stores).

This is where Spark's ``commitAsync`` lands: offsets committed here are what
``kafka-consumer-groups --describe`` and every lag monitor read. Committing uses the AdminClient
(``alter_consumer_group_offsets``), so no consumer joins the group; Kafka refuses it while the
group has active members, which protects a group that some other application is consuming with.
It does not protect against a second copy of the same stream, which has no members either:
:func:`group_members` lets a stream refuse to start beside active members, and the Kafka group
store checks the committed offsets before each commit
(:class:`~kafka_direct.stores.kafka_store.KafkaGroupStore`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition

from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.errors import KafkaClientError, NotAuthorizedError
from kafka_direct.kafka.access import check_group
from kafka_direct.kafka.admin import new_admin_client
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.offsets import PartitionOffsets, TopicPartition

__all__ = [
    "GroupCommitter",
    "GroupMember",
    "commit_group_offsets",
    "fetch_group_commits",
    "fetch_group_offsets",
    "group_members",
    "warn_gone",
]

log = logging.getLogger(__name__)

#: librdkafka's OFFSET_INVALID: the group has no committed offset for the partition.
_NO_OFFSET = -1001
#: A commit's per-partition answers for a topic the cluster no longer has.
_TOPIC_GONE = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}
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
    commits = fetch_group_commits(kafka, group, tps, timeout_s=timeout_s, admin=admin)
    return {tp: offset for tp, (offset, _metadata) in commits.items()}


def fetch_group_commits(
    kafka: Mapping[str, str],
    group: str,
    tps: Iterable[TopicPartition] | None = None,
    *,
    timeout_s: float = 30.0,
    admin: Any = None,
) -> dict[TopicPartition, tuple[int, str]]:
    """:func:`fetch_group_offsets` with each commit's metadata string ('' when none was given)."""
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
    out: dict[TopicPartition, tuple[int, str]] = {}
    for ck in result.topic_partitions or []:
        if ck.error is None and ck.offset >= 0 and ck.offset != _NO_OFFSET:
            out[TopicPartition(ck.topic, ck.partition)] = (int(ck.offset), ck.metadata or "")
    return out


def commit_group_offsets(
    kafka: Mapping[str, str],
    group: str,
    offsets: Mapping[TopicPartition, int],
    *,
    timeout_s: float = 30.0,
    admin: Any = None,
    metadata: str | None = None,
) -> dict[TopicPartition, str]:
    """Commit ``offsets`` (next offset to read, per partition) for ``group``, with the
    ``metadata`` string Kafka keeps beside each offset (the writer's name, for a store that
    must tell its own commits from another writer's).

    Kafka answers per partition, and commits the others when it refuses one. A partition of a
    topic the cluster no longer has (``UNKNOWN_TOPIC_OR_PART``: deleted since it was read) is
    not an error: it is returned with Kafka's reason, and the rest counts as committed; a
    caller that kept it for a retry would fail every later commit on it. Any other refusal
    raises :class:`~kafka_direct.errors.KafkaClientError`; callers that must never fail (the
    streaming source) catch, log and retry.
    """
    if not offsets:
        return {}
    admin = admin or new_admin_client(kafka)
    tps = [
        # confluent-kafka refuses metadata=None: leave it out when there is none.
        CkTopicPartition(tp.topic, tp.partition, int(off))
        if metadata is None
        else CkTopicPartition(tp.topic, tp.partition, int(off), metadata=metadata)
        for tp, off in sorted(offsets.items())
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
    gone: dict[TopicPartition, str] = {}
    for ck in result.topic_partitions or []:
        if ck.error is None:
            continue
        if ck.error.code() in _TOPIC_GONE:
            gone[TopicPartition(ck.topic, ck.partition)] = f"{ck.error.str()} ({ck.error.name()})"
            continue
        raise translate(ck.error, f"{context} for {ck.topic}-{ck.partition}", access=access)
    return gone


def warn_gone(gone: Mapping[TopicPartition, str], group: str, warned: set[TopicPartition]) -> None:
    """Say once per partition (``warned`` remembers) that a commit left it out."""
    new = {tp: why for tp, why in gone.items() if tp not in warned}
    if new:
        warned.update(new)
        log.warning(
            "Group '%s': Kafka no longer has %s (%s); its offset was not committed, and the "
            "other partitions' were",
            group,
            ", ".join(map(str, sorted(new))),
            next(iter(new.values())),
        )


class GroupMember(NamedTuple):
    """An active member of a consumer group, as ``kafka-consumer-groups --describe
    --members`` shows it."""

    client_id: str
    host: str
    member_id: str

    def __str__(self) -> str:
        return f"{self.client_id or '<no client.id>'} on {self.host.lstrip('/') or '?'}"


def group_members(
    kafka: Mapping[str, str], group: str, *, timeout_s: float = 30.0, admin: Any = None
) -> list[GroupMember]:
    """The active members of ``group`` (none for a group that does not exist, or that only
    holds committed offsets): one DescribeGroups request."""
    admin = admin or new_admin_client(kafka)
    context = f"Describing group '{group}'"
    access = Access(kafka, group=group, group_operations="DESCRIBE")
    with kafka_errors(context, access=access):
        futures = admin.describe_consumer_groups([group], request_timeout=timeout_s)
    try:
        description = futures[group].result(timeout=timeout_s + 5)
    except (KafkaException, FutureTimeout) as exc:
        error = translate(exc, context, access=access)
        if error.code == "GROUP_ID_NOT_FOUND":  # the consumer protocol's answer (KIP-848)
            return []
        raise error from exc
    return sorted(
        GroupMember(str(m.client_id or ""), str(m.host or ""), str(m.member_id or ""))
        for m in description.members or []
    )


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
        self._gone: set[TopicPartition] = set()

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
            gone = commit_group_offsets(
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
        warn_gone(gone, self.group, self._gone)
        self.failures = 0
        self._retry_at = 0.0
        self.last_committed = {tp: off for tp, off in offsets.items() if tp not in gone}
        log.info("Committed offsets of %d partition(s) to group '%s'", len(offsets), self.group)
        return True
