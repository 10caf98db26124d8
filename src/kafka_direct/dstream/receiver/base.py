"""What every receiver's loop shares: the consumer-group receiver
(:mod:`~kafka_direct.dstream.receiver.loop`) and the share receiver
(:mod:`~kafka_direct.dstream.receiver.share_loop`). Runs in a Spark executor (a receiver's
Python worker), as one long-running task. Plain library: neither Spark nor the Kafka client (the
consumer is injected, so unit tests run the loops against fakes).

Shared: the task's spec, the status a receiver reports and how often, the stop signals it
checks, the run skeleton (start, turn until told to stop, finish; on any failure record the
error and whether retrying can help), and how a consumer error event is classified or logged.
Each loop brings its own ``step`` (what one turn takes and logs), start and finish.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka_direct.config.receiver import ReceiverStreamConfig
from kafka_direct.dstream.receiver.control import ReceiverSignals, ReceiverStatus, write_status
from kafka_direct.dstream.receiver.control import resident_bytes as _rss
from kafka_direct.dstream.receiver.wal import BlockWriter
from kafka_direct.logs import RepeatLimiter

__all__ = ["BaseReceiver", "ReceiverSpec", "is_fatal"]

#: How often a receiver looks at the control files and the log's size, and reports its status.
SIGNALS_EVERY_S = 0.25
PENDING_EVERY_S = 0.1
STATUS_EVERY_S = 1.0


@dataclass(frozen=True)
class ReceiverSpec:
    """Everything a receiver task needs, pickled by the driver into the task."""

    config: ReceiverStreamConfig
    root: str  # walDir
    run: str
    receiver: int
    attempt: int
    orphan_timeout_s: float


class BaseReceiver:
    """A receiver's loop around an injected consumer; subclasses say what a turn does."""

    #: How its log lines name it ("Receiver 0", "Share receiver 0").
    KIND = "Receiver"

    def __init__(
        self,
        spec: ReceiverSpec,
        consumer: Any,
        writer: BlockWriter,
        signals: ReceiverSignals,
        *,
        classify_error: Callable[[Any], BaseException | None],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        report: Callable[[ReceiverStatus], None] | None,
    ) -> None:
        self.spec = spec
        self.consumer = consumer
        self.writer = writer
        self.signals = signals
        self._classify_error = classify_error
        self._clock = clock
        self._sleep = sleep
        self._report = report or (lambda status: write_status(spec.root, status))
        # The subclass's own logger: log lines keep the name of the loop they come from.
        self._log = logging.getLogger(type(self).__module__)
        self.paused = False
        self._pending_checked = self._signals_checked = self._reported = -1e18
        self._warnings = RepeatLimiter()
        self.status = ReceiverStatus(
            receiver=spec.receiver,
            run=spec.run,
            host=os.uname().nodename,
            pid=os.getpid(),
            attempt=spec.attempt,
        )

    # -- what a loop brings --------------------------------------------------------------------

    def _start(self) -> None:
        """Join the group (subscribe)."""
        raise NotImplementedError

    def step(self) -> None:
        """One turn of the loop."""
        raise NotImplementedError

    def _finish(self) -> None:
        """Told to stop: log and hand back what it holds."""
        raise NotImplementedError

    def abandon(self) -> None:
        """After a failure: forget what is not logged yet (nothing by default)."""

    def closed(self) -> None:
        """The consumer is closed (the task is ending); nothing by default."""

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> str:
        """Receive until told to stop; returns why it stopped. Raises what killed it."""
        self._log.info(
            "%s %d (attempt %d) of group '%s' starts on %s, pid %d",
            self.KIND,
            self.spec.receiver,
            self.spec.attempt,
            self.spec.config.group,
            self.status.host,
            self.status.pid,
        )
        self._start()
        self._set_state("running")
        try:
            while True:
                reason = self._stop_reason()
                if reason is not None:
                    break
                self.step()
            self._finish()
        except BaseException as exc:
            self.abandon()
            self.status.error = f"{type(exc).__name__}: {exc}"
            self.status.fatal = is_fatal(exc)
            self._set_state("failed")
            raise
        self._log.info("%s %d stops: %s", self.KIND, self.spec.receiver, reason)
        self._set_state("stopped")
        return reason

    def report(self) -> None:
        """Write the status now."""
        self._report_now(self._clock(), force=True)

    def _consumer_error(self, error: Any) -> None:
        problem = self._classify_error(error)
        if problem is not None:
            raise problem
        self._warnings.log(
            self._log,
            logging.WARNING,
            error.name(),
            "%s %d: %s",
            self.KIND,
            self.spec.receiver,
            error.str(),
        )

    # -- signals, status -----------------------------------------------------------------------

    def _stop_reason(self) -> str | None:
        now = self._clock()
        if now - self._signals_checked < SIGNALS_EVERY_S:
            return None
        self._signals_checked = now
        return self.signals.stop_reason()

    def _set_state(self, state: str) -> None:
        self.status.state = state
        self._report_now(self._clock(), force=True)  # a change of state is reported at once

    def _report_now(self, now: float, *, force: bool = False) -> None:
        if not force and now - self._reported < STATUS_EVERY_S:
            return
        self._reported = now
        self.status.rss_bytes = _rss()
        try:
            self._report(self.status)
        except OSError as exc:  # a status report must never stop the receiver
            self._warnings.log(self._log, logging.WARNING, "status", "Status not written: %s", exc)


def is_fatal(exc: BaseException) -> bool:
    """Retrying cannot help: a bad setting, or a client error Kafka calls not retriable."""
    from kafka_direct.errors import ConfigurationError, KafkaClientError

    if isinstance(exc, ConfigurationError):
        return True
    return isinstance(exc, KafkaClientError) and not exc.retriable
