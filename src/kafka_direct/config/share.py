"""The share-group stream's configuration: ``KafkaUtils.createShareStream``'s arguments, checked
before Spark is touched; each error names the argument and how to fix it. Pure: plain library
(no Spark, no Kafka client), used by the Spark driver; receivers get a pickled copy on executors.

A share stream is a receiver stream whose receivers are members of a share group (KIP-932), so
it reuses the receiver stream's settings (:mod:`kafka_direct.config.receiver`) and adds the
queue's own: ``maxDeliveryAttempts``, ``recordCheck`` and ``ackCommitInterval``. The lock
duration and the group's delivery limit are group configs on the broker; the driver reads them
at start (:mod:`kafka_direct.kafka.share_groups`) into :attr:`ShareStreamConfig.lock_duration_s`
and :attr:`ShareStreamConfig.delivery_count_limit`, so the receivers know both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from kafka_direct.config.clients import with_defaults
from kafka_direct.config.dstream import integer_at_least, param_text, positive
from kafka_direct.config.receiver import ReceiverStreamConfig, receiver_stream_config
from kafka_direct.errors import ConfigurationError

__all__ = ["ShareRecord", "ShareStreamConfig", "share_stream_config"]

#: Kafka's default ``group.share.record.lock.duration.ms``: used until the driver has read the
#: group's own value.
DEFAULT_LOCK_DURATION_S = 30.0
#: Kafka's default ``group.share.delivery.count.limit``: used until the driver has read the
#: group's own value.
DEFAULT_DELIVERY_COUNT_LIMIT = 5


@dataclass(frozen=True)
class ShareRecord:
    """What ``recordCheck`` is given: one record, as its receiver acquired it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    delivery_count: int


RecordCheck = Callable[[ShareRecord], object]


@dataclass(frozen=True)
class ShareStreamConfig(ReceiverStreamConfig):
    """``createShareStream``'s arguments, checked. Small and picklable: receivers get a copy."""

    # One below Kafka's default share.delivery.count.limit (5): a record whose last delivery
    # ended with its receiver then comes once more, and is rejected and named.
    max_delivery_attempts: int = 4
    record_check: RecordCheck | None = None
    ack_commit_interval_s: float = 1.0
    #: The group's ``share.record.lock.duration.ms`` (else the broker's), read at start.
    lock_duration_s: float = DEFAULT_LOCK_DURATION_S
    #: The group's ``share.delivery.count.limit`` (else the broker's), read at start: on that
    #: delivery the broker archives a record that comes back to it (released, or its lock
    #: expired), so it is never delivered again.
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT

    @property
    def last_attempt(self) -> int:
        """The last delivery a receiver may hand back: ``maxDeliveryAttempts``, or the group's
        delivery limit if that is lower (a record released there is archived unnamed)."""
        return min(self.max_delivery_attempts, self.delivery_count_limit)

    def consumer_config(self, receiver_id: int) -> dict[str, str]:
        """librdkafka share-consumer config of receiver ``receiver_id``: a share-group member."""
        settings = with_defaults(
            self.kafka,
            {
                "client.id": f"kafka-direct-share-receiver-{receiver_id}",
                # The client acquires about this many records per fetch. librdkafka's 500 lets
                # one receiver take a whole backlog while the others wait; each poll is also one
                # fsynced block, so not much lower.
                "max.poll.records": "100",
            },
        )
        settings.update(
            {
                "group.id": self.group,
                # A receiver acknowledges each record itself, once its block is in the log.
                "share.acknowledgement.mode": "explicit",
            }
        )
        return settings


def share_stream_config(
    params: Mapping[str, Any],
    topics: object,
    *,
    batch_interval: object,
    num_receivers: object,
    wal_dir: object,
    max_pending_blocks: object,
    include_headers: object,
    max_delivery_attempts: object,
    record_check: object,
    ack_commit_interval: object,
    retained_batches: object,
) -> ShareStreamConfig:
    """Check ``createShareStream``'s arguments; each error names the argument and the fix."""
    if isinstance(params, Mapping):
        _check_share_params(params)
    base = receiver_stream_config(
        params,
        topics,
        batch_interval=batch_interval,
        num_receivers=num_receivers,
        write_ahead_log=True,
        wal_dir=wal_dir,
        max_rate_per_receiver=None,
        max_pending_blocks=max_pending_blocks,
        block_interval=min(0.2, float(batch_interval))
        if isinstance(batch_interval, int | float) and batch_interval > 0
        else 0.2,
        include_headers=include_headers,
        retained_batches=retained_batches,
    )
    attempts = integer_at_least("maxDeliveryAttempts", max_delivery_attempts, minimum=1)
    if record_check is not None and not callable(record_check):
        raise ConfigurationError(
            "recordCheck",
            type(record_check).__name__,
            "a function of one ShareRecord, or None",
            "It runs in the receivers for each record before it is logged; raise to refuse it.",
        )
    interval = positive("ackCommitInterval", ack_commit_interval, "seconds")
    common = {f.name: getattr(base, f.name) for f in fields(ReceiverStreamConfig)}
    return ShareStreamConfig(
        **common,
        max_delivery_attempts=attempts,
        record_check=record_check,
        ack_commit_interval_s=interval,
    )


def check_lock_budget(config: ShareStreamConfig, lock_duration_s: float) -> None:
    """Acknowledgements must reach the broker well inside the lock: at most a quarter of it."""
    if config.ack_commit_interval_s > lock_duration_s / 4:
        raise ConfigurationError(
            "ackCommitInterval",
            config.ack_commit_interval_s,
            f"at most a quarter of the group's record lock ({lock_duration_s:g} s)",
            "Acknowledgements that reach the broker after the lock expires are refused and the "
            "records are delivered again. Lower ackCommitInterval, or raise the group config "
            "share.record.lock.duration.ms (broker default group.share.record.lock.duration.ms).",
        )


def _check_share_params(params: Mapping[str, Any]) -> None:
    group = params.get("group.id")
    if group is None or not str(group).strip():
        raise ConfigurationError(
            "group.id",
            group,
            "a share group id",
            "Receivers are members of this share group: the broker hands each record to one "
            "of them. Add 'group.id': 'my-queue' to kafkaParams.",
        )
    for key in ("auto.offset.reset", "enable.auto.commit"):
        if key in params and params[key] is not None:
            raise ConfigurationError(
                key,
                param_text(params[key]),
                "no value: share groups do not use it",
                "A share group starts where its group config share.auto.offset.reset says "
                "(latest by default); set it with kafka-configs --entity-type groups "
                "--entity-name GROUP --alter --add-config share.auto.offset.reset=earliest, or "
                "kafka_direct.kafka.share_groups.alter_share_group_config. Receivers acknowledge "
                "records themselves. Remove the key.",
            )
