"""What the direct and the receiver stream share: registering the batch function, the loop
thread and its schedule, ``stop``, ``awaitTermination``, errors and progress. Runs in the Spark
driver (the user's process).

Each stream supplies its batch (``_run_batch``) and what happens around the loop; this base
holds the DStream-shaped lifecycle, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kafka_direct.errors import ConfigurationError, StreamStateError
from kafka_direct.offsets import OffsetRange

__all__ = ["BatchFunction", "JobControl", "Stopped", "StreamLifecycle"]

log = logging.getLogger(__name__)

BatchFunction = Callable[[Any, list[OffsetRange]], object]
InfoT = TypeVar("InfoT")
SelfT = TypeVar("SelfT", bound="StreamLifecycle[Any]")


@dataclass(frozen=True)
class JobControl:
    """Tags the loop thread's Spark jobs so that ``stop(graceful=False)`` can cancel them.

    Spark job tags are thread-local, so ``tag`` runs in the loop thread and ``interrupt`` in the
    thread that calls ``stop``. Built by :mod:`kafka_direct.dstream.kafka_utils` for the session
    at hand.
    """

    tag: Callable[[], object]
    interrupt: Callable[[], object]
    untag: Callable[[], object]


class Stopped(Exception):
    """The running batch was abandoned by ``stop(graceful=False)``."""


class StreamLifecycle(Generic[InfoT]):
    """``foreachBatch``, ``start`` checks, ``stop``, ``awaitTermination`` and progress."""

    def __init__(
        self,
        *,
        jobs: JobControl | None,
        clock: Callable[[], float],
        retained_batches: int,
    ) -> None:
        self._jobs = jobs
        self._clock = clock
        self._fn: BatchFunction | None = None
        self._lock = threading.Lock()
        self._batches: deque[InfoT] = deque(maxlen=retained_batches)
        self._thread: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self._graceful = True
        self._terminated = threading.Event()
        self._error: BaseException | None = None

    @property
    def group_id(self) -> str:
        raise NotImplementedError

    def _state(self) -> str:
        return "active" if self.isActive else ("stopped" if self._thread else "not started")

    def foreachBatch(self: SelfT, fn: BatchFunction) -> SelfT:
        """Register ``fn(df, offsetRanges)``, called once per batch, even for an empty one."""
        if self._thread is not None:
            raise StreamStateError("foreachBatch() must be called before start().")
        if not callable(fn):
            raise ConfigurationError("foreachBatch", fn, "a function fn(df, offsetRanges)")
        self._fn = fn
        return self

    def _check_startable(self) -> None:
        if self._fn is None:
            raise StreamStateError(
                "No batch function registered: call stream.foreachBatch(fn) before start()."
            )
        if self._thread is not None or self._stop_requested.is_set():
            raise StreamStateError("A stream can be started only once; create a new one.")

    def _start_loop(self, target: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    def stop(self, graceful: bool = True, timeout: float | None = None) -> None:
        """Stop the stream and wait (up to ``timeout`` s) for it to end.

        ``graceful=True`` lets the running batch finish; ``graceful=False`` cancels its Spark
        jobs. What else each stream does on stop is in its class's documentation.
        """
        self._graceful = self._graceful and graceful
        self._stop_requested.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return  # not started, or called from the batch function: the loop ends after it
        deadline = None if timeout is None else time.monotonic() + timeout
        while thread.is_alive():
            if not graceful and self._jobs is not None:
                # Again and again: a job the batch submits after a cancel must be cancelled too
                # (a batch's first job can take seconds to plan).
                self._jobs.interrupt()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            thread.join(0.2 if left is None else min(0.2, left))

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait until the stream stops; True if it has. Re-raises the error that stopped it."""
        if self._thread is None:
            raise StreamStateError("The stream was never started: call start() first.")
        done = self._terminated.wait(timeout)
        if self._error is not None:
            raise self._error
        return done

    def exception(self) -> BaseException | None:
        """The error that stopped the stream, or None."""
        return self._error

    @property
    def isActive(self) -> bool:
        return self._thread is not None and not self._terminated.is_set()

    @property
    def batches(self) -> list[InfoT]:
        """The finished batches, oldest first (the last ``retainedBatches``)."""
        with self._lock:
            return list(self._batches)

    @property
    def recentProgress(self) -> list[InfoT]:
        return self.batches

    @property
    def lastProgress(self) -> InfoT | None:
        with self._lock:
            return self._batches[-1] if self._batches else None

    def _batch_times(self, interval_s: float) -> Iterator[tuple[int, float, float]]:
        """``(batch_id, batch_time, due)`` every ``interval_s`` from now, until a stop.

        A batch that runs late delays the next one only until it ends: batches stay due on the
        original schedule, and the scheduling delay says how late each one started.
        """
        started, wall = self._clock(), time.time()
        batch_id = 0
        while True:
            due = started + batch_id * interval_s
            if self._stop_requested.wait(max(0.0, due - self._clock())):
                return
            yield batch_id, wall + (due - started), due
            batch_id += 1

    def _tag_jobs(self) -> None:
        if self._jobs is not None:
            self._jobs.tag()

    def _untag_jobs(self) -> None:
        if self._jobs is not None:
            try:
                self._jobs.untag()
            except Exception as exc:  # noqa: BLE001 - cleanup is best effort
                log.debug("Removing the job tag of stream %s: %s", self.group_id, exc)
