"""The share-group stream: ``KafkaUtils.createShareStream``, a queue (KIP-932) read by receivers.
Runs in the Spark driver (the user's process): the receiver stream's batch loop, with share
receivers on executors (:mod:`~kafka_direct.dstream.receiver.share_client`).

Everything downstream of the receivers is the receiver stream's (:mod:`.stream`): the write-ahead
log, the batches over its blocks, recovery of unprocessed blocks after a driver restart, the
lifecycle. What differs is upstream: the receivers are members of a *share* group, so any number
of them read the same partitions, each record goes to one of them, and a receiver acknowledges a
record (``ACCEPT``) only once its block is in the log. At start the driver reads the group's
lock duration and delivery limit (:mod:`kafka_direct.kafka.share_groups`) and hands both to the
receivers, refuses an ``ackCommitInterval`` that is not well inside the lock, and warns when the
broker could archive a record unnamed: when ``maxDeliveryAttempts`` is not below the group's
delivery limit, a record whose last delivery ends with its receiver (killed, hung) is archived
without any receiver seeing it again. Each batch, the records the receivers rejected since the
last one are logged here, in the driver (only the new lines of each receiver's file are read),
and kept in :attr:`ShareKafkaStream.rejected`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

from kafka_direct.config.share import ShareStreamConfig, check_lock_budget
from kafka_direct.dstream.lifecycle import JobControl
from kafka_direct.dstream.receiver.control import RejectionReader, read_rejected
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
        self._rejections: RejectionReader | None = None
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
        limit = settings.delivery_count_limit
        if self.config.max_delivery_attempts >= limit:
            log.warning(
                "Stream %s: maxDeliveryAttempts=%d, and share group '%s' archives a record on "
                "its delivery %d (group config share.delivery.count.limit): a record whose "
                "delivery %d ends without its receiver (killed or hung before it logged the "
                "record) is archived by the broker unnamed, never in stream.rejected. Set "
                "maxDeliveryAttempts to %d or less (the receivers then reject and name such a "
                "record on delivery %d), or raise share.delivery.count.limit above it.",
                self.group_id,
                self.config.max_delivery_attempts,
                self.config.group,
                limit,
                limit,
                limit - 1,
                limit,
            )
        if settings.auto_offset_reset == "latest":
            log.info(
                "Share group '%s' starts at the latest offset (group config "
                "share.auto.offset.reset=latest): records produced before its first member "
                "joined are not delivered",
                self.config.group,
            )
        self.config = dataclasses.replace(
            self.config, lock_duration_s=lock_s, delivery_count_limit=limit
        )
        # Rejections of earlier runs were reported by them: count only this run's.
        self._rejections = RejectionReader(self.config.wal_dir or "")
        self._rejections.skip_existing()
        super().start()

    @property
    def rejected(self) -> list[dict[str, Any]]:
        """Every record the receivers rejected: topic, partition, offset, delivery_count,
        reason, receiver. Kept in walDir, so a restarted stream still lists them."""
        return [] if self.wal_dir is None else read_rejected(self.wal_dir)

    def _new_rejections(self) -> int:
        new = [] if self._rejections is None else self._rejections.read_new()
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
        # Every attempt's last report: a dead attempt's counts are kept when it restarts.
        statuses = [] if self._supervisor is None else self._supervisor.all_statuses()
        counts = self._lock_watch.since_last(
            [(s.receiver, s.attempt, s.lock_expired, s.accept_refused) for s in statuses]
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
