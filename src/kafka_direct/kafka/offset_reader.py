"""Driver-side offset reader on the Kafka AdminClient. Runs in the Spark driver (Python planner
and stream-runner processes), and in the user's process for the CLI. Implements
:class:`kafka_direct.planning.reader.OffsetReader`.

The counterpart of Spark's ``KafkaOffsetReaderAdmin``: which partitions a strategy names, and
their earliest, latest and by-timestamp offsets, each as ONE ``list_offsets`` request for all
partitions. The client is created lazily and dropped on pickling, so a reader can be built in
``__init__``-free code and shipped anywhere.

What the cluster answers is checked before anyone uses it:

- **Every offset, per partition.** A partition whose leader is down, moving or too slow comes
  back with an error, or with no error and librdkafka's ``OFFSET_INVALID`` (-1001). Neither is
  ever returned as an offset: such partitions make the call raise
  :class:`~kafka_direct.errors.OffsetsUnavailableError`, which carries the valid answers of the
  same request, so a stream can advance the partitions that did answer.
- **First contact fails fast.** Until some broker has answered this reader, a failure is not an
  outage but, most likely, a wrong address, a port that is not Kafka, or bad security settings:
  the first call waits at most ``connect_timeout_s`` (10 s), then fails with the cause the client
  reported and what to check. Once connected, a request that fails with a retriable error is
  made ``fetchOffset.numRetries`` times in all, ``fetchOffset.retryIntervalMs`` apart (Spark's
  options, counted as Spark counts them: 3 attempts, 1 s apart); the stream planner adds its
  own patience on top (``fetchOffset.unavailableTimeout``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ConfigResource,
    ResourceType,
)
from confluent_kafka.admin import OffsetSpec as _CkOffsetSpec  # type: ignore[attr-defined]

from kafka_direct.config.kafka import KafkaConfig, Subscription
from kafka_direct.errors import KafkaClientError, OffsetsUnavailableError, TopicNotFoundError
from kafka_direct.kafka.access import check_topics
from kafka_direct.kafka.admin import new_admin_client
from kafka_direct.kafka.events import SILENT, ClientEvents, reach_advice
from kafka_direct.kafka.groups import fetch_group_offsets
from kafka_direct.kafka.translate import kafka_errors, translate
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.planning.reader import (
    SubscriptionRules,
    TimestampType,
    assigned_partitions,
    matching_topics,
    rules_for,
)

__all__ = ["INTERNAL_TOPICS", "AdminOffsetReader"]

log = logging.getLogger(__name__)
# confluent-kafka ships OffsetSpec untyped; typed as Any once here rather than at every call.
CkOffsetSpec: Any = _CkOffsetSpec
T = TypeVar("T")

#: librdkafka's OFFSET_INVALID: what ListOffsets answers, with no error, for a partition whose
#: leader did not answer in time.
OFFSET_INVALID = -1001

#: Kafka's internal topics (``Topic.isInternal``): a pattern never picks them, as neither the
#: Java consumer (``exclude.internal.topics``) nor Spark's admin listing does. Other names that
#: start with ``__`` are ordinary topics (Debezium's heartbeats, Kafka Streams' ...).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def _describe_invalid(offset: int) -> str:
    if offset == OFFSET_INVALID:
        return "no valid offset (OFFSET_INVALID: its leader did not answer in time)"
    return f"an invalid offset {offset}"


class AdminOffsetReader:
    """:class:`OffsetReader` over ``confluent_kafka.admin.AdminClient``."""

    def __init__(
        self,
        kafka: Mapping[str, str],
        *,
        isolation_level: str = "read_uncommitted",
        num_retries: int = 3,
        retry_interval_ms: int = 1000,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        admin_factory: Callable[[Mapping[str, str], ClientEvents], Any] | None = None,
    ) -> None:
        self._kafka = KafkaConfig(kafka)
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        #: Attempts in all, as Spark counts 'fetchOffset.numRetries' (at least one).
        self._num_retries = max(1, num_retries)
        self._retry_interval_s = retry_interval_ms / 1000.0
        self._timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._admin_factory = admin_factory or new_admin_client
        self._admin: Any = None
        self._events: ClientEvents | None = None
        self._connected = False
        self._checked: set[str] = set()
        #: Describe named topics (True once first contact showed a controller to ask; False
        #: after a describe failed): else list every topic, as before.
        self._describe = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # a live client never crosses a process boundary
        state["_events"] = None
        state["_connected"] = False
        return state

    def __repr__(self) -> str:
        return f"AdminOffsetReader(bootstrap={self._kafka.get('bootstrap.servers')!r})"

    @property
    def admin(self) -> Any:
        if self._admin is None:
            events = ClientEvents("The Kafka admin client")
            self._admin = self._admin_factory(self._kafka, events)
            self._events = events
        return self._admin

    def _client_said(self) -> ClientEvents | None:
        """The admin client's error events, once librdkafka has handed them over (``poll``)."""
        if self._admin is not None and self._events is not None:
            poll = getattr(self._admin, "poll", None)
            if poll is not None:
                poll(0)
        return self._events

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference frees librdkafka's handle.
        self._admin = None
        self._connected = False

    def _bootstrap(self) -> str:
        return f"'kafka.bootstrap.servers'={self._kafka.get('bootstrap.servers', '')!r}"

    # -- first contact -------------------------------------------------------------------------

    def connect(self) -> None:
        """Wait (at most ``connect_timeout_s``) for a first answer from the cluster.

        Raises a non-retriable :class:`KafkaClientError` with the client's own explanation when
        none comes: nothing at the address, a host that does not resolve, a server that is not
        Kafka, failed authentication or TLS. Cheap once connected.
        """
        if self._connected:
            return
        admin = self.admin
        mark = self._events.mark() if self._events is not None else 0
        try:
            with kafka_errors("Connecting to the Kafka cluster"):
                meta = admin.list_topics(timeout=self._connect_timeout_s)
        except KafkaClientError as exc:
            events = self._client_said()
            fatal = events.config_error(mark) if events is not None else None
            if fatal is not None:
                cause = str(fatal)
            else:
                cause = events.unanswered() if events is not None else SILENT
            raise KafkaClientError(
                f"Could not reach the Kafka cluster at {self._bootstrap()} within "
                f"{self._connect_timeout_s:g} s: {cause}.{reach_advice(cause)} Once a query "
                "has reached its cluster, later outages are waited out.",
                code=fatal.code if fatal is not None else exc.code,
                retriable=False,
            ) from exc
        self._connected = True
        # librdkafka sends DescribeTopics to the controller the metadata names; a cluster that
        # names none of its brokers (librdkafka's mock cluster) would leave it unanswered.
        self._describe = getattr(meta, "controller_id", -1) in getattr(meta, "brokers", {})

    # -- metadata ------------------------------------------------------------------------------

    def topic_partitions(self) -> dict[str, set[int]]:
        """Every topic and its partitions (no topic auto-creation side effect), Kafka's
        internal topics included: a topic named explicitly is read as given, as the Java
        consumer reads one; pattern subscriptions leave them out (:meth:`partitions`)."""

        def call() -> dict[str, set[int]]:
            with kafka_errors("Fetching topic metadata"):
                meta = self.admin.list_topics(timeout=self._timeout_s)
            return {name: set(t.partitions) for name, t in meta.topics.items() if t.error is None}

        return self._retrying("fetch topic metadata", call)

    def named_topic_partitions(self, names: Iterable[str]) -> dict[str, set[int]]:
        """The partitions of the topics ``names`` that exist: ONE DescribeTopics request for
        just them. A stream asks at every trigger, and a listing of the whole cluster
        (:meth:`topic_partitions`) grows with every topic in it. As in a listing, a topic that
        does not exist, or that this principal may not describe, is left out (describing a
        topic never auto-creates it, where a metadata request for it from this client would).
        A name is taken as given, a name starting with ``__`` and Kafka's internal topics
        included (the Java consumer's ``exclude.internal.topics`` applies to patterns only). If
        describing fails once (no controller answers), this reader lists the cluster's topics
        from then on: slower, never wrong."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        self.connect()
        if self._describe:
            try:
                return self._described(wanted)
            except KafkaClientError as exc:
                self._describe = False
                log.info(
                    "Describing the topics %s failed (%s); listing the cluster's topics instead",
                    ", ".join(wanted),
                    exc,
                )
        listed = self.topic_partitions()
        return {t: listed[t] for t in wanted if t in listed}

    def _described(self, wanted: list[str]) -> dict[str, set[int]]:
        timeout_s = min(self._timeout_s, self._connect_timeout_s)
        with kafka_errors("Describing the topics"):
            futures: dict[str, Future[Any]] = self.admin.describe_topics(
                TopicCollection(wanted), request_timeout=timeout_s
            )
        out: dict[str, set[int]] = {}
        for name, future in futures.items():
            try:
                description = future.result(timeout=timeout_s + 5)
            except (KafkaException, FutureTimeout) as exc:
                error = translate(exc, f"Describing topic {name}")
                # Missing, or not this principal's to see: a listing would leave it out too.
                if (
                    isinstance(error, TopicNotFoundError)
                    or error.code == "TOPIC_AUTHORIZATION_FAILED"
                ):
                    continue
                raise error from exc
            out[name] = {p.id for p in description.partitions}
        return out

    def partitions(
        self, strategy: Subscription, *, rules: SubscriptionRules | None = None
    ) -> set[TopicPartition]:
        rules = rules_for(strategy, rules)
        if strategy.kind == "subscribe":
            self.check_rights(strategy.topics)
            named = self.named_topic_partitions(strategy.topics)
            return {TopicPartition(t, p) for t in strategy.topics if t in named for p in named[t]}
        if strategy.kind == "assign":
            self.check_rights(sorted({tp.topic for tp in strategy.partitions}))
            topics = self.named_topic_partitions(tp.topic for tp in strategy.partitions)
            return assigned_partitions(strategy.partitions, topics, rules)
        # subscribePattern: every topic's name, as Spark's connector lists them at each trigger
        # (its admin listing, like the Java consumer's pattern subscription, leaves Kafka's
        # internal topics out).
        topics = {
            t: parts for t, parts in self.topic_partitions().items() if t not in INTERNAL_TOPICS
        }
        matched = matching_topics(strategy.pattern or "", topics, rules.pattern)
        self.check_rights(matched)
        return {TopicPartition(t, p) for t in matched for p in topics[t]}

    def check_rights(self, topics: Iterable[str]) -> None:
        """May this principal READ ``topics``? Kafka leaves the topics a principal may not
        DESCRIBE out of a listing, and a topic it may DESCRIBE but not READ fails only in the
        executors' fetch: ask Kafka by name, once per topic and reader (a stream asks at every
        trigger), and fail before any task runs with the principal, the topic and the grant
        (:mod:`kafka_direct.kafka.access`). A topic that really is missing is left to the
        caller (TopicNotFoundError, or a pattern's later topic)."""
        unchecked = [t for t in topics if t not in self._checked]
        if not unchecked:
            return
        with kafka_errors("Checking the rights on the topics"):
            check_topics(self.admin, self._kafka, unchecked, "READ", timeout_s=self._timeout_s)
        self._checked.update(unchecked)

    # -- offsets -------------------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list(tps, lambda _tp: CkOffsetSpec.earliest(), "earliest")

    def latest(
        self, tps: Iterable[TopicPartition], known: Mapping[TopicPartition, int] | None = None
    ) -> PartitionOffsets:
        wanted = list(tps)
        result = self._list(wanted, lambda _tp: CkOffsetSpec.latest(), "latest")
        # A latest offset behind one we already saw can be a stale answer from a replica just
        # made leader (KAFKA-7703). As Spark, ask up to numRetries times in all, retryIntervalMs
        # (1 s) apart: an answer still behind is reported as data loss, so the wait must outlast
        # the new leader catching up (replica fetches wait up to 500 ms); 10 ms never did.
        for attempt in range(2, self._num_retries + 1):
            behind = [tp for tp, off in result.items() if known and off < known.get(tp, -1)]
            if not behind:
                break
            log.info("Latest offsets went backwards for %s; asking again (%d)", behind, attempt)
            time.sleep(self._retry_interval_s)
            result.update(self._list(behind, lambda _tp: CkOffsetSpec.latest(), "latest"))
        return result

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        wanted = set(tps)
        return self._retrying(
            f"fetch committed offsets of group '{group}'",
            lambda: fetch_group_offsets(
                self._kafka, group, wanted, timeout_s=self._timeout_s, admin=self.admin
            ),
        )

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._list(stamps, lambda tp: CkOffsetSpec.for_timestamp(stamps[tp]), "timestamp")

    def timestamp_types(self, topics: Iterable[str]) -> dict[str, TimestampType]:
        """Each topic's ``message.timestamp.type``: ONE DescribeConfigs request for all topics.

        One attempt, not retried: filter pushdown is its only user, and it reads on without
        the answer (it then cuts no range by an upper timestamp bound) rather than wait.
        Anything but ``LogAppendTime`` counts as ``CreateTime``, the type that cuts nothing.
        """
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        self.connect()
        resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in wanted]
        with kafka_errors("Describing topic configs"):
            futures: dict[Any, Future[Any]] = self.admin.describe_configs(
                resources, request_timeout=self._timeout_s
            )
        out: dict[str, TimestampType] = {}
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=self._timeout_s + 5)
            except (KafkaException, FutureTimeout) as exc:
                raise translate(exc, f"Describing the config of topic {resource.name}") from exc
            entry = entries.get("message.timestamp.type")
            appended = entry is not None and entry.value == "LogAppendTime"
            out[resource.name] = "LogAppendTime" if appended else "CreateTime"
        return out

    def _list(
        self, tps: Iterable[TopicPartition], spec: Callable[[TopicPartition], Any], kind: str
    ) -> dict[TopicPartition, int]:
        wanted = sorted(set(tps))
        if not wanted:
            return {}

        def call() -> dict[TopicPartition, int]:
            request = {CkTopicPartition(tp.topic, tp.partition): spec(tp) for tp in wanted}
            with kafka_errors("Listing offsets"):
                futures: dict[Any, Future[Any]] = self.admin.list_offsets(
                    request,
                    isolation_level=self._isolation,
                    request_timeout=self._timeout_s,
                )
            out: dict[TopicPartition, int] = {}
            unavailable: dict[TopicPartition, str] = {}
            errors: list[KafkaClientError] = []
            for ck_tp, future in futures.items():
                tp = TopicPartition(ck_tp.topic, ck_tp.partition)
                try:
                    offset = int(future.result(timeout=self._timeout_s + 5).offset)
                except (KafkaException, FutureTimeout) as exc:
                    error = translate(exc, f"Listing {kind} offsets of {tp}")
                    if isinstance(error, TopicNotFoundError):
                        # The metadata this call planned from lists the topic, yet the leader
                        # does not know it: brokers learn a created or recreated topic from the
                        # controller one by one. Asked again (now, then at the next trigger), a
                        # topic that is really gone drops out of the metadata instead.
                        raise KafkaClientError(
                            f"{error} (its leader does not know the topic yet)",
                            code=error.code,
                            retriable=True,
                        ) from exc
                    errors.append(error)
                    unavailable[tp] = str(error).split(": ", 1)[-1]
                    continue
                # -1 is a real answer only to a timestamp lookup: no record is that recent.
                if offset >= 0 or (kind == "timestamp" and offset == -1):
                    out[tp] = offset
                else:
                    unavailable[tp] = _describe_invalid(offset)
            if unavailable:
                raise _unavailable(kind, out, unavailable, errors)
            return out

        return self._retrying(f"list {kind} offsets", call)

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        self.connect()
        # The admin client lives as long as the query: only events of this call count.
        mark = self._events.mark() if self._events is not None else 0
        # fetchOffset.numRetries counts attempts, as Spark's withRetries does (3: two retries).
        for attempt in range(1, self._num_retries + 1):
            try:
                return call()
            except TopicNotFoundError:
                raise
            except KafkaClientError as exc:
                events = self._client_said()
                fatal = events.config_error(mark) if events is not None else None
                if fatal is not None:
                    # Authentication, TLS: another attempt would fail the same way.
                    raise KafkaClientError(
                        f"Could not {what}: {fatal}", code=fatal.code, retriable=False
                    ) from exc
                if not exc.retriable or attempt >= self._num_retries:
                    raise self._final(what, attempt, exc, events) from exc
                log.info("Failed to %s (attempt %d): %s", what, attempt, exc)
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable: fetchOffset.numRetries is at least 1")

    def _final(
        self, what: str, attempts: int, exc: KafkaClientError, events: ClientEvents | None
    ) -> KafkaClientError:
        said = events.summary() if events is not None else ""
        cause = f" The client reported: {said}." if said else ""
        retry = (
            " To wait longer, raise 'fetchOffset.numRetries' / 'fetchOffset.retryIntervalMs'."
            if exc.retriable
            else ""
        )
        message = (
            f"Could not {what} from {self._bootstrap()} after {attempts} attempt(s): "
            f"{exc}.{cause}{retry}"
        )
        if isinstance(exc, OffsetsUnavailableError):
            return OffsetsUnavailableError(
                message, offsets=exc.offsets, unavailable=exc.unavailable, code=exc.code
            )
        return KafkaClientError(message, code=exc.code, retriable=exc.retriable)


def _unavailable(
    kind: str,
    offsets: Mapping[TopicPartition, int],
    unavailable: Mapping[TopicPartition, str],
    errors: list[KafkaClientError],
) -> OffsetsUnavailableError:
    shown = "; ".join(f"{tp}: {why}" for tp, why in sorted(unavailable.items())[:5])
    if len(unavailable) > 5:
        shown += f"; and {len(unavailable) - 5} more"
    return OffsetsUnavailableError(
        f"no valid {kind} offset for {len(unavailable)} partition(s) ({shown})",
        offsets=offsets,
        unavailable=unavailable,
        code=errors[0].code if errors else "OFFSET_INVALID",
    )
