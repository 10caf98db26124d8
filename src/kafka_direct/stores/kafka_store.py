"""Offsets in a Kafka consumer group (``__consumer_offsets``). Runs in the Spark driver (the
direct stream's ``offsetStore=``, ``foreachBatch`` functions) and in the user's process (CLI).

Where Spark's ``commitAsync`` commits: offsets stored here are what ``kafka-consumer-groups
--describe`` and every lag monitor show. A Kafka commit cannot join your database's transaction,
so this store gives at-least-once output (commit after the output is written), not exactly-once;
for that, keep offsets with the results in :class:`~kafka_direct.stores.SqlOffsetStore`.

**One writer per group.** Commits go through the admin client, so no consumer of this store
joins the group, and Kafka accepts commits for a group without members from anyone. Spark's
driver consumer joins the group, so a second copy of a Spark Streaming application is noticed
(its partitions are revoked and the stream fails). Here, each commit is a compare-and-set
instead. Every store writes its own name into each commit's metadata (Kafka keeps a string
beside each committed offset), and before committing it reads the group's commits (one
request): where one is not what this store last loaded or committed, offset and writer alike,
the commit is refused with :class:`~kafka_direct.errors.OffsetConflictError`, which stops a
direct stream. Two copies of a stream are told apart even when they commit the same offsets:
the first commit of one makes the next commit of the other fail. The read and the commit are
two requests, not one atomic step, so two writers committing within the same moment can both
pass once; the next commit of either is refused.

confluent-kafka is imported on first use, so importing the stores stays light.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka_direct.config.kafka import KafkaConfig, redact
from kafka_direct.errors import (
    ConfigurationError,
    KafkaClientError,
    NotAuthorizedError,
    OffsetConflictError,
)
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.stores.base import OffsetStore, ends_of

__all__ = ["KafkaGroupStore"]

log = logging.getLogger(__name__)

#: Answers of a cluster that cannot describe groups.
_CANNOT_DESCRIBE = {"_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION"}

#: A partition's commit in the group: (offset, metadata), or None for "nothing committed".
_Commit = tuple[int, str] | None


class KafkaGroupStore(OffsetStore):
    """:class:`OffsetStore` over Kafka consumer groups, through the AdminClient.

    ``kafka_config`` holds librdkafka keys (``bootstrap.servers``, ``security.protocol``...);
    source-style ``kafka.``-prefixed keys are accepted too. No consumer joins the group, and
    Kafka refuses a commit while the group has active members (another application consuming
    with it): that error is raised as :class:`~kafka_direct.errors.KafkaClientError`.

    :meth:`save` is a compare-and-set (see the module docstring): a partition that this store
    has loaded or committed must still hold that offset in the group, else
    :class:`~kafka_direct.errors.OffsetConflictError`. A partition this store has never seen
    is committed as given. A partition of a deleted topic is left out of the commit, with a
    warning once.
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
        #: Per group and partition: the commits this store may find there (what it loaded or
        #: committed last; several after a commit whose outcome is unknown).
        self._seen: dict[str, dict[TopicPartition, set[_Commit]]] = {}
        self._gone: set[TopicPartition] = set()
        #: This store's name in the metadata of its commits.
        self.writer = f"kafka-direct {uuid.uuid4().hex[:16]}"

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
        from kafka_direct.kafka.groups import fetch_group_commits

        found = fetch_group_commits(
            self.kafka_config, group, wanted, timeout_s=self._timeout_s, admin=self.admin
        )
        seen = self._seen.setdefault(group, {})
        for tp in found if wanted is None else wanted:
            seen[tp] = {found.get(tp)}
        return {tp: offset for tp, (offset, _metadata) in found.items()}

    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        """Commit the highest ``untilOffset`` per partition to the group, if the group still
        holds what this store last loaded or committed (else
        :class:`~kafka_direct.errors.OffsetConflictError`, and nothing is committed)."""
        from kafka_direct.kafka.groups import commit_group_offsets, warn_gone

        ends = ends_of(ranges)
        if not ends:
            return
        seen = self._seen.setdefault(group, {})
        self._check_unmoved(group, ends, seen)
        try:
            gone = commit_group_offsets(
                self.kafka_config,
                group,
                ends,
                timeout_s=self._timeout_s,
                admin=self.admin,
                metadata=self.writer,
            )
        except NotAuthorizedError:
            raise
        except Exception:
            # The commit may have landed all the same (a timeout after the broker wrote it):
            # the next check must accept it too.
            for tp, offset in ends.items():
                if tp in seen:
                    seen[tp].add((offset, self.writer))
            raise
        warn_gone(gone, group, self._gone)
        for tp, offset in ends.items():
            if tp in gone:
                seen.pop(tp, None)
            else:
                seen[tp] = {(offset, self.writer)}

    def _check_unmoved(
        self,
        group: str,
        ends: Mapping[TopicPartition, int],
        seen: Mapping[TopicPartition, set[_Commit]],
    ) -> None:
        """Refuse to commit where the group's commit changed since this store saw it."""
        from kafka_direct.kafka.groups import fetch_group_commits

        watched = sorted(tp for tp in ends if tp in seen)
        if not watched:
            return
        now = fetch_group_commits(
            self.kafka_config, group, watched, timeout_s=self._timeout_s, admin=self.admin
        )
        moved = {tp: now.get(tp) for tp in watched if now.get(tp) not in seen[tp]}
        if not moved:
            return
        details = "; ".join(
            f"{tp} is at {self._describe(commit)} in the group, where this stream last "
            f"committed or started from {' or '.join(sorted(map(self._describe, seen[tp])))}"
            for tp, commit in sorted(moved.items())
        )
        raise OffsetConflictError(
            group,
            details,
            fix=(
                "The commit was refused. Another process commits to the same group: most often "
                "a second copy of this application (the direct stream does not join the group, "
                "so Kafka does not stop it), or the group's offsets were reset while it ran. "
                "Run one stream per group.id; a restarted stream resumes from the group's "
                "offsets."
            ),
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

    def attach_stream(self, group: str, *, fail_on_data_loss: bool) -> None:
        """Refuse a stream beside active members of ``group``: they read the same partitions,
        and Kafka refuses this store's commits while they are there. (Spark's DStream fails
        too, once its driver consumer's partitions go to the other members.) A check that
        cannot be made (the cluster not answering) is logged, and the stream starts: each
        commit still checks the group's offsets."""
        from kafka_direct.kafka.groups import group_members

        try:
            members = group_members(
                self.kafka_config, group, timeout_s=self._timeout_s, admin=self.admin
            )
        except KafkaClientError as exc:
            # Not answered now, or not at all (librdkafka's mock cluster has no DescribeGroups):
            # the commits' own check remains.
            if not exc.retriable and exc.code not in _CANNOT_DESCRIBE:
                raise
            log.warning("Could not check group '%s' for active members: %s", group, exc)
            return
        if members:
            shown = ", ".join(str(m) for m in members[:5])
            more = f" and {len(members) - 5} more" if len(members) > 5 else ""
            raise ConfigurationError(
                "group.id",
                group,
                f"a consumer group without active members; it has {len(members)}: {shown}{more}",
                "The direct stream commits through the admin client and does not join the "
                "group, so it cannot share one with consumers that do: both would read every "
                "partition, and Kafka refuses its commits while they are active. Stop them, or "
                "give this stream a group.id of its own.",
            )

    def __enter__(self) -> KafkaGroupStore:
        return self

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference frees librdkafka's handle.
        self._admin = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # a live client never crosses a process boundary
        return state

    def _describe(self, commit: _Commit) -> str:
        if commit is None:
            return "no committed offset"
        offset, metadata = commit
        if metadata == self.writer:
            return f"{offset} (this stream's commit)"
        return f"{offset} (committed by {metadata or 'a writer that names none'})"

    def __repr__(self) -> str:
        shown = redact(dict(self.kafka_config))
        return f"KafkaGroupStore({shown!r})"
