"""Riding out a cluster that does not answer, within a bound. Pure: runs in the Spark driver
(the stream runner, the direct stream's loop); no Spark, no Kafka client.

A stream asks the cluster for offsets at every trigger. When a partition's leader is down, slow
or moving, or the whole cluster is unreachable, the answer is missing. Failing the query at once
(what a few quick retries amounted to before) turns a ten-second leader election into an outage
of the application. Waiting forever hides a cluster that is gone. :class:`OffsetPatience` sits
between the two, like Flink's Kafka source:

- a partition without an answer does not advance in this trigger; the others do;
- with no answer at all, the trigger plans nothing and the next trigger asks again;
- a warning says so, at most every :data:`WARN_EVERY_S` seconds, with the cause;
- only when a partition, or the whole cluster, has given no offsets for
  ``fetchOffset.unavailableTimeout`` does the stream fail, naming the option;
- a trigger whose partition discovery (a metadata request) gets no answer plans the partitions
  of the last answer (:meth:`OffsetPatience.partitions`). librdkafka sends metadata requests to
  the broker it used last, which under a slow broker is the slow one, again and again: without
  this, one slow broker stopped every partition, not only the ones it leads.

:meth:`OffsetPatience.wait_for` is the blocking form, for lookups a batch cannot be planned
without (a new partition's earliest offset while the batch is already in Spark's offset log).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from kafka_direct.errors import KafkaClientError, TopicNotFoundError
from kafka_direct.logs import RepeatLimiter
from kafka_direct.offsets import TopicPartition

__all__ = ["WARN_EVERY_S", "OffsetPatience"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often a continuing outage is reported.
WARN_EVERY_S = 30.0

_OPTION = "fetchOffset.unavailableTimeout"


def _now_s() -> float:
    return time.monotonic()


class OffsetPatience:
    """How long the cluster may go without answering; see the module docstring."""

    def __init__(
        self,
        timeout_ms: int,
        *,
        clock_s: Callable[[], float] = _now_s,
        sleep_s: Callable[[float], None] = time.sleep,
        what: str = "The stream",
    ) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self._clock = clock_s
        self._sleep = sleep_s
        self._what = what
        self._limiter = RepeatLimiter(WARN_EVERY_S, clock_s)
        self._outage_since: float | None = None
        self._partitions_since: dict[TopicPartition, float] = {}
        self._known: set[TopicPartition] | None = None

    def __getstate__(self) -> dict[str, object]:
        # The stream reader is pickled to executors; its waiting state belongs to the driver.
        state = self.__dict__.copy()
        state["_outage_since"] = None
        state["_partitions_since"] = {}
        state["_known"] = None
        return state

    # -- one trigger at a time -----------------------------------------------------------------

    def answered(self, tps: Iterable[TopicPartition] = ()) -> None:
        """The cluster answered (for ``tps``): their waiting, and any outage, is over."""
        if self._outage_since is not None:
            log.warning(
                "%s has offsets from the cluster again after %.0f s",
                self._what,
                self._clock() - self._outage_since,
            )
        self._outage_since = None
        for tp in tps:
            since = self._partitions_since.pop(tp, None)
            if since is not None:
                log.warning(
                    "%s: %s answers again after %.0f s", self._what, tp, self._clock() - since
                )

    def partial(self, unavailable: Mapping[TopicPartition, str]) -> None:
        """Some partitions gave no valid offset: they do not advance in this trigger.

        Raises once one of them has had none for longer than the bound.
        """
        now = self._clock()
        for tp in unavailable:
            self._partitions_since.setdefault(tp, now)
        oldest = min(unavailable, key=lambda tp: self._partitions_since[tp])
        waited = now - self._partitions_since[oldest]
        if waited >= self.timeout_s:
            raise KafkaClientError(
                f"{self._what} has had no valid offset for {oldest} for {waited:.0f} s "
                f"({unavailable[oldest]}), longer than '{_OPTION}' "
                f"({self.timeout_s:g} s). Check the partition's leader; to wait longer, raise "
                f"'{_OPTION}'.",
                code="OFFSETS_UNAVAILABLE",
                retriable=False,
            )
        shown = "; ".join(f"{tp}: {why}" for tp, why in sorted(unavailable.items())[:5])
        self._limiter.log(
            log,
            logging.WARNING,
            ("partial", tuple(sorted(unavailable))),
            "%s: no valid offset for %d partition(s), which do not advance for now (%s); "
            "waiting up to '%s' (%g s)",
            self._what,
            len(unavailable),
            shown,
            _OPTION,
            self.timeout_s,
        )

    def outage(self, exc: KafkaClientError) -> None:
        """No answer at all in this trigger: plan nothing, ask again next time.

        Raises ``exc`` when it cannot pass (not retriable), or a clear error once the outage
        has lasted longer than the bound.
        """
        if not exc.retriable or isinstance(exc, TopicNotFoundError):
            raise exc
        now = self._clock()
        if self._outage_since is None:
            self._outage_since = now
        waited = now - self._outage_since
        if waited >= self.timeout_s:
            raise KafkaClientError(
                f"{self._what} has had no offsets from the cluster for {waited:.0f} s, longer "
                f"than '{_OPTION}' ({self.timeout_s:g} s). Last error: {exc}. To wait longer, "
                f"raise '{_OPTION}'.",
                code=exc.code,
                retriable=False,
            ) from exc
        self._limiter.log(
            log,
            logging.WARNING,
            "outage",
            "%s gets no offsets from the cluster (%.0f s so far, waiting up to '%s' = %g s): %s",
            self._what,
            waited,
            _OPTION,
            self.timeout_s,
            exc,
        )

    def partitions(self, discover: Callable[[], set[TopicPartition]]) -> set[TopicPartition]:
        """``discover()``'s partitions; when it fails with a retriable error after an earlier
        answer, that answer (new partitions then wait for a later trigger).

        Raises the error when there is no earlier answer, when it is not retriable, or when a
        topic is missing. The offsets asked for next decide whether the cluster is out.
        """
        try:
            found = discover()
        except TopicNotFoundError:
            raise
        except KafkaClientError as exc:
            if not exc.retriable or self._known is None:
                raise
            self._limiter.log(
                log,
                logging.WARNING,
                "discovery",
                "%s: could not list the partitions (%s); planning the %d known so far",
                self._what,
                exc,
                len(self._known),
            )
            return set(self._known)
        self._known = set(found)
        return found

    # -- blocking ------------------------------------------------------------------------------

    def wait_for(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried with a growing pause while it fails with a retriable error, for up
        to the bound; then, or on any other error, its error."""
        began = self._clock()
        pause = 0.1
        while True:
            try:
                result = fn()
            except TopicNotFoundError:
                raise
            except KafkaClientError as exc:
                if not exc.retriable:
                    raise
                waited = self._clock() - began
                if waited >= self.timeout_s:
                    raise KafkaClientError(
                        f"Could not {what} for {waited:.0f} s, longer than '{_OPTION}' "
                        f"({self.timeout_s:g} s): {exc}. To wait longer, raise '{_OPTION}'.",
                        code=exc.code,
                        retriable=False,
                    ) from exc
                self._limiter.log(
                    log,
                    logging.WARNING,
                    ("wait", what),
                    "%s: could not %s (%.0f s so far, waiting up to '%s' = %g s): %s",
                    self._what,
                    what,
                    waited,
                    _OPTION,
                    self.timeout_s,
                    exc,
                )
                self._sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            if self._clock() - began > 1.0:
                log.warning("%s could %s again", self._what, what)
            return result
