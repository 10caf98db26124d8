"""Starting, watching, restarting and stopping the receivers. Runs in the Spark driver (the
user's process): one thread per receiver, plus the heartbeat.

Spark Streaming's ``ReceiverTracker`` launches each receiver as a Spark job of its own, with one
long-running task, so that a receiver that dies fails only its own job. PySpark can do the same
with a job per driver thread: ``sc.parallelize([i], 1).foreachPartition(receiver_task)``. The
task runs on an executor like any other, so receivers work on a cluster, not only in the driver.
Each thread:

- tags its jobs (``sc.addJobTag``), so that :meth:`ReceiverSupervisor.stop` can cancel a
  receiver that does not stop when asked;
- waits for its job; when it ends without a stop request, the receiver died. The reason comes
  from the receiver's own status file (its exception), else from Spark's error (a crashed
  worker). It is logged, and the receiver restarts after a delay (:class:`RestartPolicy`),
  unless retrying cannot help (a refused setting, denied access) or it keeps dying at once:
  then the stream stops with :class:`ReceiverFailedError`.

Before anything starts, :meth:`ReceiverSupervisor.check` refuses what cannot work: a setting
librdkafka refuses, an unreachable cluster or a missing topic (:func:`check_kafka`), too few task
slots for the receivers plus the batches (``receiver_policy.check_slots``), and a ``walDir``
that executors do not share with the driver (a token written by the driver that a small Spark
job must find on every executor it reaches).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka_direct.config.receiver import ReceiverStreamConfig
from kafka_direct.dstream.receiver.control import (
    DriverBeacon,
    ReceiverStatus,
    check_probe,
    clear_statuses,
    read_status,
    remove_status,
    write_probe,
)
from kafka_direct.dstream.receiver.loop import ReceiverSpec
from kafka_direct.dstream.receiver.policy import (
    IdleWatch,
    RestartPolicy,
    SlotLedger,
    check_slots,
    idle_warning,
    task_slots,
)
from kafka_direct.errors import ConfigurationError, ReceiverFailedError, TopicNotFoundError

__all__ = ["ReceiverFailedError", "ReceiverSupervisor", "check_kafka", "check_topics"]

log = logging.getLogger(__name__)

#: How often the driver beats, and how long receivers wait for a silent driver.
BEAT_INTERVAL_S = 2.0
ORPHAN_TIMEOUT_S = 60.0
#: How long a starting driver watches another run's heartbeat before it takes the walDir over
#: (three beats: a live driver beats in that time, even a loaded one most often).
CLAIM_WAIT_S = 3 * BEAT_INTERVAL_S
#: Every receiver stream running in this driver, for the slot check.
SLOTS = SlotLedger()

#: How long a running receiver may go without a partition before the driver warns.
IDLE_WARNING_S = 30.0

#: How long executors may take to register before the slot check gives up (not local).
_EXECUTOR_WAIT_S = 30.0
#: A Python error line inside Spark's error text: "kafka_direct.errors.KafkaClientError: ...".
_ERROR_LINE = re.compile(r"^\s*\w[\w.]*(Error|Exception)\b")


class ReceiverSupervisor:
    """The receivers of one run of a stream."""

    def __init__(
        self,
        spark: Any,
        config: ReceiverStreamConfig,
        root: str,
        run: str,
        *,
        on_failure: Callable[[BaseException], None],
        policy: Callable[[], RestartPolicy] = RestartPolicy,
        task: Callable[..., None] | None = None,
        check_cluster: Callable[[ReceiverStreamConfig], None] | None = None,
    ) -> None:
        self._sc = _spark_context(spark)
        self.config = config
        self.root = root
        self.run = run
        self._on_failure = on_failure
        self._policy = policy
        # The receivers' Spark task and the cluster check: a consumer group's by default, a
        # share group's for createShareStream (dstream.receiver.share_client).
        self._task = task
        self._check_cluster = check_cluster or check_kafka
        self._beacon = DriverBeacon(root, run)
        self._tag = f"kafka-direct-receivers-{run}"
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._restarts = [0] * config.num_receivers
        #: Each receiver's current attempt, and the last status of its attempts that ended
        #: (their files are deleted once read: the driver keeps their counts).
        self._attempts = [0] * config.num_receivers
        self._ended: dict[tuple[int, int], ReceiverStatus] = {}
        self._beat_thread: threading.Thread | None = None
        self.slots = 0
        self._app = str(getattr(self._sc, "applicationId", "") or id(self._sc))

    # -- before start ---------------------------------------------------------------------------

    def check(self) -> None:
        """The Kafka settings and topics, enough task slots, and a walDir the executors share;
        each failure names what to fix."""
        self._check_cluster(self.config)
        conf = self._sc.getConf()
        master = str(self._sc.master)
        cpus = int(conf.get("spark.task.cpus", "1"))
        deadline = time.monotonic() + _EXECUTOR_WAIT_S
        while True:
            slots, local = task_slots(
                master, int(self._sc.defaultParallelism), cpus, os.cpu_count() or 1
            )
            others = SLOTS.others(self._app, self.run)
            if slots > self.config.num_receivers + others or local:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)  # executors may still be registering
        check_slots(
            self.config.num_receivers,
            slots,
            local=local,
            master=master,
            task_cpus=cpus,
            others=others,
        )
        self.slots = slots
        # One task per slot reaches every executor (Spark spreads them); a local master has
        # one machine and one file system, so one task says all there is to say.
        self._check_shared(1 if local else slots)

    def _check_shared(self, tasks: int) -> None:
        name, token = write_probe(self.root)
        root = self.root
        try:
            results = (
                self._sc.parallelize(range(tasks), tasks)
                .map(lambda _i: check_probe(root, name, token))
                .collect()
            )
        finally:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(root, name))
        failed = sorted({(host, why) for host, why in results if why is not None})
        if failed:
            shown = "; ".join(f"on {host}: {why}" for host, why in failed[:3])
            raise ConfigurationError(
                "walDir",
                root,
                "a directory every node of the cluster shares",
                f"Executors cannot use it as the driver does ({shown}). Receivers write the "
                "log there and batch tasks read it, on any node: mount the same shared "
                "directory (NFS or similar) at the same path on every node.",
            )

    def claim(self, wait_s: float = CLAIM_WAIT_S) -> None:
        """Take ``walDir`` over before anything in it is touched: refused (naming walDir) while
        another run's heartbeat still advances (:meth:`DriverBeacon.claim`)."""
        previous = self._beacon.claim(wait_s=wait_s)
        if previous is not None:
            log.info(
                "walDir %s: taking over from run %s, whose driver no longer beats",
                self.root,
                previous,
            )

    def release(self) -> None:
        """Mark this run stopped in ``driver.json`` (a start that failed after :meth:`claim`)."""
        with contextlib.suppress(OSError):
            self._beacon.release()

    # -- running --------------------------------------------------------------------------------

    def start(self) -> None:
        SLOTS.hold(self._app, self.run, self.config.num_receivers)
        self._beacon.clear()
        self._beacon.beat()
        clear_statuses(self.root)  # earlier runs': this run's receivers write their own
        beat = threading.Thread(target=self._beat, name=f"kafka-direct-beat-{self.run}")
        beat.daemon = True
        beat.start()
        self._beat_thread = beat
        for index in range(self.config.num_receivers):
            thread = threading.Thread(
                target=self._supervise,
                args=(index,),
                name=f"kafka-direct-receiver-{index}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def statuses(self) -> list[ReceiverStatus]:
        """Each receiver's current attempt, as it last reported itself."""
        out = []
        for index in range(self.config.num_receivers):
            attempt = self._attempts[index]
            status = read_status(self.root, index, attempt)
            if status is None or status.run != self.run:
                # Ended (and not restarted: its last report, with its error), or not started.
                ended = self._ended.get((index, attempt))
                status = ended or ReceiverStatus(index, self.run, attempt=attempt)
            out.append(status)
        return out

    def all_statuses(self) -> list[ReceiverStatus]:
        """Every attempt of every receiver: those that ended (their last report) and the
        current ones. What the driver adds counters up from."""
        current = [s for s in self.statuses() if (s.receiver, s.attempt) not in self._ended]
        return [*self._ended.values(), *current]

    @property
    def restarts(self) -> list[int]:
        return list(self._restarts)

    def stop(self, *, graceful: bool) -> None:
        """Ask the receivers to stop (each logs its block, commits, leaves the group); cancel
        those that do not end in time."""
        self._stopping.set()
        try:
            self._beacon.request_stop()
        except OSError as exc:
            log.warning("Could not write the receivers' stop marker: %s", exc)
        deadline = time.monotonic() + (30.0 if graceful else 5.0)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            log.warning("Receivers did not stop within the time allowed; cancelling their tasks")
            self._sc.cancelJobsWithTag(self._tag)
            for thread in self._threads:
                thread.join(10.0)
        SLOTS.release(self._app, self.run)
        self._beacon.clear()
        if self._beat_thread is not None:
            self._beat_thread.join(BEAT_INTERVAL_S + 1.0)
        self.release()

    def _watch_idle(self, watch: IdleWatch) -> None:
        """Warn about receivers that have run without a partition for IDLE_WARNING_S."""
        reports = [
            (s.receiver, s.state, bool(s.assignment)) for s in self.statuses() if s.run == self.run
        ]
        idle = watch.idle(reports, time.monotonic())
        if idle:
            log.warning(
                "%s", idle_warning(idle, self.config.group, self.config.topics, watch.after_s)
            )

    def _beat(self) -> None:
        watch = IdleWatch(IDLE_WARNING_S)
        while not self._stopping.wait(BEAT_INTERVAL_S):
            try:
                self._watch_idle(watch)
            except (OSError, ValueError) as exc:  # a warning must never stop the heartbeat
                log.debug("Could not read the receivers' reports: %s", exc)
            owner = self._beacon.owner()
            if owner is not None and owner != self.run:
                self._on_failure(
                    ConfigurationError(
                        "walDir",
                        self.root,
                        "a directory used by one stream at a time",
                        f"Another run of a stream ({owner}) has taken it over while this one "
                        "was running. Give each stream its own walDir.",
                    )
                )
                return
            try:
                self._beacon.beat()
            except OSError as exc:
                log.warning("Could not write the driver's heartbeat in %s: %s", self.root, exc)

    def _supervise(self, index: int) -> None:
        from kafka_direct.dstream.receiver.client import receiver_task

        task = self._task or receiver_task
        self._sc.addJobTag(self._tag)
        self._sc.setLocalProperty(
            "spark.job.description", f"kafka_direct receiver {index} ({self.config.group})"
        )
        policy = self._policy()
        attempt = 0
        while not self._stopping.is_set():
            spec = ReceiverSpec(self.config, self.root, self.run, index, attempt, ORPHAN_TIMEOUT_S)
            began = time.monotonic()
            error: BaseException | None = None
            try:
                self._sc.parallelize([index], 1).foreachPartition(functools.partial(task, spec))
            except Exception as exc:  # noqa: BLE001 - py4j and Spark errors: the reason is read below
                error = exc
            if self._stopping.is_set():
                return
            status = read_status(self.root, index, attempt)
            mine = status is not None and status.run == self.run and status.attempt == attempt
            if mine and status is not None:
                # Its last report holds counts the driver has not added up yet: kept here,
                # so the next attempt's file starts afresh and nothing is overwritten.
                self._ended[(index, attempt)] = status
                remove_status(self.root, index, attempt)
            reason = _reason(status if mine else None, error)
            decision = policy.failed(
                time.monotonic() - began, fatal=mine and status is not None and status.fatal
            )
            if not decision.restart:
                log.error("Receiver %d died and is not restarted: %s", index, reason)
                self._on_failure(
                    ReceiverFailedError(index, self.config.group, reason, decision.consecutive)
                )
                return
            self._restarts[index] += 1
            attempt += 1
            self._attempts[index] = attempt
            log.warning(
                "Receiver %d died: %s. Restarting it in %.1f s (restart %d)",
                index,
                reason,
                decision.delay_s,
                self._restarts[index],
            )
            if self._stopping.wait(decision.delay_s):
                return


def _spark_context(spark: Any) -> Any:
    try:
        sc = spark.sparkContext
        sc.addJobTag  # noqa: B018 - probe: Spark Connect has no SparkContext
    except Exception as exc:  # Connect raises its own error types here
        raise ConfigurationError(
            "spark",
            type(spark).__name__,
            "a classic SparkSession (with a SparkContext)",
            "Receivers are long-running Spark jobs launched through the RDD API, which Spark "
            "Connect does not offer. Use a classic session, or KafkaUtils.createDirectStream.",
        ) from exc
    return sc


def _reason(status: ReceiverStatus | None, error: BaseException | None) -> str:
    """Why a receiver's task ended: its own report, else the last error line Spark gave."""
    if status is not None and status.error:
        return status.error
    if error is None:
        state = status.state if status is not None else "unknown"
        return f"its task ended by itself (state {state})"
    text = str(error)
    if "exited unexpectedly" in text or "crashed" in text:
        return "its Python worker exited unexpectedly (killed, or it crashed)"
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.match(ln)]
    first = text.splitlines()[0] if text else ""
    return lines[-1] if lines else f"{type(error).__name__}: {first}"


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def check_kafka(config: ReceiverStreamConfig) -> None:
    """A setting librdkafka refuses, a cluster that does not answer, a missing topic or a
    missing right fail at start, naming what to fix. (Imported here: they load the Kafka
    client.)"""
    from kafka_direct.kafka.access import authenticates, check_group
    from kafka_direct.kafka.admin import check_consumer_config, new_admin_client
    from kafka_direct.kafka.translate import kafka_errors

    check_consumer_config(config.consumer_config(0), config.kafka)
    partitions = check_topics(config)
    # Receivers are members of the group and commit to it (READ), and a refusal would only
    # show in their tasks: say it here, with the principal.
    if authenticates(config.kafka):
        with kafka_errors(f"Checking the rights on group '{config.group}'"):
            check_group(
                new_admin_client(config.kafka), config.kafka, config.group,
                what="the receivers join and commit to this group",
            )  # fmt: skip
    if config.num_receivers > partitions:
        log.warning(
            "numReceivers=%d, but the topics have %d partition(s): %d receiver(s) will get no "
            "partition from the group (each partition has one reader in a group) and sit idle",
            config.num_receivers,
            partitions,
            config.num_receivers - partitions,
        )


def check_topics(config: ReceiverStreamConfig) -> int:
    """Every topic exists (else the error names them) and may be READ (else the error names
    the principal); returns their partition count."""
    from kafka_direct.kafka.offset_reader import AdminOffsetReader

    reader = AdminOffsetReader(config.kafka)
    try:
        reader.connect()
        topics = reader.topic_partitions()
        reader.check_rights(config.topics)
    finally:
        reader.close()
    missing = [t for t in config.topics if t not in topics]
    if missing:
        raise TopicNotFoundError(
            f"Topic(s) {', '.join(missing)} do not exist on the cluster; receivers of group "
            f"'{config.group}' would wait for them forever. Create them first, or fix 'topics'."
        )
    return sum(len(topics[t]) for t in config.topics)
