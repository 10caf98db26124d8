"""The share-group stream: ``KafkaUtils.createShareStream``, a queue (KIP-932) read by receivers.
Runs in the Spark driver (the user's process): the receiver stream's batch loop, with share
receivers on executors (:mod:`~kafka_direct.dstream.receiver.share_client`).

Everything downstream of the receivers is the receiver stream's (:mod:`.stream`): the write-ahead
log, the batches over its blocks, recovery of unprocessed blocks after a driver restart, the
lifecycle. What differs is upstream: the receivers are members of a *share* group, so any number
of them read the same partitions, each record goes to one of them, and a receiver acknowledges a
record (``ACCEPT``) only once its block is in the log. At start the driver reads the group's
lock duration and delivery limit (:mod:`kafka_direct.kafka.share_groups`), refuses an
``ackCommitInterval`` that is not well inside the lock, and warns when the broker would archive a
record before ``maxDeliveryAttempts`` is reached (it would not be named). Each batch, the records
the receivers rejected since the last one are logged here, in the driver, and kept in
:attr:`ShareKafkaStream.rejected`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

from kafka_direct.config.share import ShareStreamConfig, check_lock_budget
from kafka_direct.dstream.lifecycle import JobControl
from kafka_direct.dstream.receiver.control import read_rejected
from kafka_direct.dstream.receiver.share_acks import LockWatch, lock_warning
from kafka_direct.dstream.receiver.stream import ReceiverKafkaStream
from kafka_direct.dstream.receiver.supervisor import ReceiverSupervisor
from kafka_direct.errors import StreamStateError
from kafka_direct.logs import RepeatLimiter

__all__ = ["ShareKafkaStream"]

log = logging.getLogger(__name__)


class ShareKafkaStream(ReceiverKafkaStream):
    """A share-group stream. Build it with ``KafkaUtils.createShareStream``.

    At-least-once: every record acquired from the group is processed at least once, and a record
    is processed twice only after a failure (counted in each batch's ``redelivered_records`` and
    ``recovered_blocks``).
    """

    config: ShareStreamConfig

    def __init__(self, spark: Any, config: ShareStreamConfig, *, jobs: JobControl | None = None):
        from kafka_direct.dstream.receiver.share_client import (
            check_share_cluster,
            share_receiver_task,
        )

        super().__init__(
            spark,
            config,
            jobs=jobs,
            supervisor_factory=functools.partial(
                ReceiverSupervisor, task=share_receiver_task, check_cluster=check_share_cluster
            ),
        )
        self._seen_rejections = 0
        self.group_settings: Any = None
        self._lock_watch = LockWatch()
        # Once a minute at most: a lock too short for the load loses locks every batch.
        self._lock_warnings = RepeatLimiter()

    def __repr__(self) -> str:
        return (
            f"ShareKafkaStream(share group={self.config.group}, topics="
            f"{','.join(self.config.topics)}, {self.config.num_receivers} receiver(s), "
            f"{self._state()})"
        )

    def commitAsync(self, *_args: object, **_kwargs: object) -> None:
        raise StreamStateError(
            "A share stream acknowledges by itself: each receiver accepts a record as soon as "
            "its block is in the write-ahead log. Remove the commitAsync call."
        )

    def start(self) -> None:
        """Read the group's lock and delivery limit, check them, then start as a receiver
        stream does (walDir, topics, task slots, recovery, receivers, batch loop)."""
        from kafka_direct.kafka.share_groups import share_group_settings

        self._check_startable()
        settings = share_group_settings(self.config.kafka, self.config.group)
        self.group_settings = settings
        lock_s = settings.lock_duration_ms / 1000
        check_lock_budget(self.config, lock_s)
        if self.config.max_delivery_attempts > settings.delivery_count_limit:
            log.warning(
                "Stream %s: maxDeliveryAttempts=%d, but share group '%s' archives a record after "
                "%d deliveries (group config share.delivery.count.limit): such records are "
                "dropped by the broker without being named. Lower maxDeliveryAttempts, or raise "
                "share.delivery.count.limit.",
                self.group_id,
                self.config.max_delivery_attempts,
                self.config.group,
                settings.delivery_count_limit,
            )
        if settings.auto_offset_reset == "latest":
            log.info(
                "Share group '%s' starts at the latest offset (group config "
                "share.auto.offset.reset=latest): records produced before its first member "
                "joined are not delivered",
                self.config.group,
            )
        self.config = dataclasses.replace(self.config, lock_duration_s=lock_s)
        # Rejections of earlier runs were reported by them: count only this run's.
        self._seen_rejections = len(read_rejected(self.config.wal_dir or ""))
        super().start()

    @property
    def rejected(self) -> list[dict[str, Any]]:
        """Every record the receivers rejected: topic, partition, offset, delivery_count,
        reason, receiver. Kept in walDir, so a restarted stream still lists them."""
        return [] if self.wal_dir is None else read_rejected(self.wal_dir)

    def _new_rejections(self) -> int:
        rejected = self.rejected
        new = rejected[self._seen_rejections :]
        self._seen_rejections = len(rejected)
        for entry in new:
            log.warning(
                "Stream %s: record %s-%s@%s rejected after %s deliveries: %s",
                self.group_id,
                entry.get("topic"),
                entry.get("partition"),
                entry.get("offset"),
                entry.get("delivery_count"),
                entry.get("reason"),
            )
        return len(new)

    def _lock_progress(self) -> tuple[int, int]:
        counts = self._lock_watch.since_last(
            [(s.receiver, s.attempt, s.lock_expired, s.accept_refused) for s in self.receivers]
        )
        if counts:
            self._lock_warnings.log(
                log,
                logging.WARNING,
                "lock",
                "%s",
                lock_warning(
                    self.group_id,
                    self.config.group,
                    round(self.config.lock_duration_s * 1000),
                    counts,
                ),
            )
        return counts.lock_expired, counts.refused_accepts
