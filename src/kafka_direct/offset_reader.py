"""Driver-side offset reader on the Kafka AdminClient. Runs in the Spark driver (Python planner
and stream-runner processes), and in the user's process for the CLI. Implements
:class:`kafka_direct.positions.OffsetReader`.

The counterpart of Spark's ``KafkaOffsetReaderAdmin``: which partitions a strategy names, and
their earliest, latest and by-timestamp offsets, each as ONE ``list_offsets`` request for all
partitions. Calls are retried ``fetchOffset.numRetries`` times. The client is created lazily and
dropped on pickling, so a reader can be built in ``__init__``-free code and shipped anywhere.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as _CkOffsetSpec  # type: ignore[attr-defined]

from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.kafka_io import ClientEvents, kafka_errors, translate
from kafka_direct.offsets import PartitionOffsets, TopicPartition
from kafka_direct.options import KafkaConfig, Strategy
from kafka_direct.settings import admin_config

__all__ = ["AdminOffsetReader"]

log = logging.getLogger(__name__)
# confluent-kafka ships OffsetSpec untyped; typed as Any once here rather than at every call.
OffsetSpec: Any = _CkOffsetSpec
T = TypeVar("T")


def _admin_client(config: dict[str, Any]) -> Any:
    return AdminClient(dict(config))


class AdminOffsetReader:
    """:class:`OffsetReader` over ``confluent_kafka.admin.AdminClient``."""

    def __init__(
        self,
        kafka: KafkaConfig,
        *,
        isolation_level: str = "read_uncommitted",
        num_retries: int = 3,
        retry_interval_ms: int = 10,
        request_timeout_s: float = 30.0,
        admin_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._kafka = kafka
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._num_retries = num_retries
        self._retry_interval_s = retry_interval_ms / 1000.0
        self._timeout_s = request_timeout_s
        self._admin_factory: Callable[[dict[str, Any]], Any] = admin_factory or _admin_client
        self._admin: Any = None
        self._events: ClientEvents | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_admin"] = None  # a live client never crosses a process boundary
        state["_events"] = None
        return state

    def __repr__(self) -> str:
        return f"AdminOffsetReader(bootstrap={self._kafka.get('bootstrap.servers')!r})"

    @property
    def admin(self) -> Any:
        if self._admin is None:
            events = ClientEvents("The Kafka admin client")
            with kafka_errors("Creating the Kafka admin client"):
                self._admin = self._admin_factory({**admin_config(self._kafka), "error_cb": events})
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

    def _bootstrap(self) -> str:
        return f"'kafka.bootstrap.servers'={self._kafka.get('bootstrap.servers', '')!r}"

    # -- metadata ------------------------------------------------------------------------------

    def topic_partitions(self) -> dict[str, set[int]]:
        """Every non-internal topic and its partitions (no topic auto-creation side effect)."""

        def call() -> dict[str, set[int]]:
            with kafka_errors("Fetching topic metadata"):
                meta = self.admin.list_topics(timeout=self._timeout_s)
            return {
                name: set(t.partitions)
                for name, t in meta.topics.items()
                if t.error is None and not name.startswith("__")
            }

        return self._retrying("fetch topic metadata", call)

    def partitions(self, strategy: Strategy) -> set[TopicPartition]:
        topics = self.topic_partitions()
        if strategy.kind == "subscribe":
            wanted = [t for t in strategy.topics if t in topics]
            return {TopicPartition(t, p) for t in wanted for p in topics[t]}
        if strategy.kind == "subscribePattern":
            pattern = re.compile(strategy.pattern or "")
            return {
                TopicPartition(t, p) for t, ps in topics.items() if pattern.fullmatch(t) for p in ps
            }
        missing = [tp for tp in strategy.partitions if tp.partition not in topics.get(tp.topic, ())]
        if missing:
            names = ", ".join(str(tp) for tp in missing)
            raise TopicNotFoundError(
                f"Option 'assign' names {names}, which the cluster does not have. "
                "Create the topic (or partitions) first, or fix the 'assign' JSON."
            )
        return set(strategy.partitions)

    # -- offsets -------------------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list(tps, lambda _tp: OffsetSpec.earliest())

    def latest(
        self, tps: Iterable[TopicPartition], known: Mapping[TopicPartition, int] | None = None
    ) -> PartitionOffsets:
        wanted = list(tps)
        result = self._list(wanted, lambda _tp: OffsetSpec.latest())
        # A latest offset behind one we already saw can be a stale answer from a lagging
        # replica (KAFKA-7703); Spark re-asks before believing it, and so do we.
        for attempt in range(self._num_retries):
            behind = [tp for tp, off in result.items() if known and off < known.get(tp, -1)]
            if not behind:
                break
            log.info("Latest offsets went backwards for %s; re-checking (%d)", behind, attempt + 1)
            time.sleep(self._retry_interval_s)
            result.update(self._list(behind, lambda _tp: OffsetSpec.latest()))
        return result

    def committed(self, group: str, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from kafka_direct.group_offsets import fetch_group_offsets

        wanted = set(tps)
        return self._retrying(
            f"fetch committed offsets of group '{group}'",
            lambda: fetch_group_offsets(
                self._kafka, group, wanted, timeout_s=self._timeout_s, admin=self.admin
            ),
        )

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return self._list(stamps, lambda tp: OffsetSpec.for_timestamp(stamps[tp]))

    def _list(
        self, tps: Iterable[TopicPartition], spec: Callable[[TopicPartition], Any]
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
            for ck_tp, future in futures.items():
                tp = TopicPartition(ck_tp.topic, ck_tp.partition)
                try:
                    out[tp] = int(future.result(timeout=self._timeout_s + 5).offset)
                except KafkaException as exc:
                    raise translate(exc, f"Listing offsets of {tp}") from exc
            return out

        return self._retrying("list offsets", call)

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        # The admin client lives as long as the query: only events of this call count.
        mark = self._events.mark() if self._events is not None else 0
        for attempt in range(self._num_retries + 1):
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
                if attempt >= self._num_retries:
                    said = events.summary() if events is not None else ""
                    cause = (
                        f" The client reported: {said}."
                        if said
                        else " Check that 'kafka.bootstrap.servers' is reachable."
                    )
                    raise KafkaClientError(
                        f"Could not {what} from {self._bootstrap()} after {attempt + 1} "
                        f"attempts: {exc}.{cause} To wait longer, raise "
                        "'fetchOffset.numRetries' / 'fetchOffset.retryIntervalMs'.",
                        code=exc.code,
                        retriable=exc.retriable,
                    ) from exc
                log.warning("Failed to %s (attempt %d): %s", what, attempt + 1, exc)
                time.sleep(self._retry_interval_s)
        raise AssertionError("unreachable")
