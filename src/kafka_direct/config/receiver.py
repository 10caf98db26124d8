"""The receiver stream's configuration: ``KafkaUtils.createStream``'s arguments, checked before
Spark is touched; each error names the argument and how to fix it. Pure: plain library (no
Spark, no Kafka client), used by the Spark driver; receivers get a pickled copy on executors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_direct.config.clients import receiver_consumer_config
from kafka_direct.config.dstream import (
    AutoOffsetReset,
    integer_at_least,
    non_negative,
    param_text,
    positive,
    validate_params,
)
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.errors import ConfigurationError

__all__ = ["DEFAULT_BLOCK_INTERVAL_S", "ReceiverStreamConfig", "receiver_stream_config"]

#: Spark's ``spark.streaming.blockInterval``: how often a receiver closes a block.
DEFAULT_BLOCK_INTERVAL_S = 0.2

#: librdkafka's spelling of the reset policy the receivers' consumers get.
_LIBRDKAFKA_RESET = {"earliest": "earliest", "latest": "latest", "none": "error"}


@dataclass(frozen=True)
class ReceiverStreamConfig:
    """``createStream``'s arguments, checked. Small and picklable: receivers get a copy."""

    kafka: KafkaConfig  # the user's client settings, without the keys the receivers own
    group: str
    auto_offset_reset: AutoOffsetReset
    topics: tuple[str, ...]
    batch_interval_s: float
    num_receivers: int
    write_ahead_log: bool
    wal_dir: str | None  # None: a scratch directory made at start (only without the WAL)
    max_rate_per_receiver: float  # records/s per receiver; 0 = no limit
    max_pending_blocks: int
    block_interval_s: float
    include_headers: bool
    retained_batches: int

    def consumer_config(self, receiver_id: int) -> dict[str, str]:
        """librdkafka consumer config of receiver ``receiver_id``: a member of ``group``."""
        return receiver_consumer_config(
            self.kafka,
            group=self.group,
            auto_offset_reset=_LIBRDKAFKA_RESET[self.auto_offset_reset],
            receiver_id=receiver_id,
        )


def receiver_stream_config(
    params: Mapping[str, Any],
    topics: object,
    *,
    batch_interval: object,
    num_receivers: object,
    write_ahead_log: object,
    wal_dir: object,
    max_rate_per_receiver: object,
    max_pending_blocks: object,
    block_interval: object,
    include_headers: object,
    retained_batches: object,
) -> ReceiverStreamConfig:
    """Check ``createStream``'s arguments; each error names the argument and how to fix it."""
    if isinstance(params, Mapping):
        _check_receiver_params(params)
    kafka, group, reset = validate_params(params)
    interval = positive("batchInterval", batch_interval, "seconds")
    block = positive("blockInterval", block_interval, "seconds")
    if block > interval:
        raise ConfigurationError(
            "blockInterval",
            block_interval,
            f"at most batchInterval ({interval:g} s)",
            "A batch takes the blocks closed so far; a block interval longer than the batch "
            "interval leaves batches empty. Lower blockInterval (default 0.2 s).",
        )
    receivers = _positive_int("numReceivers", num_receivers)
    for name, flag in (("writeAheadLog", write_ahead_log), ("includeHeaders", include_headers)):
        if not isinstance(flag, bool):
            raise ConfigurationError(name, flag, "True or False")
    rate = (
        0.0
        if max_rate_per_receiver is None
        else non_negative("maxRatePerReceiver", max_rate_per_receiver)
    )
    if max_pending_blocks is None:
        # About four batches' worth of blocks: a stream that keeps up never pauses, one that
        # falls behind pauses before its backlog (disk, and the first batch after) grows more.
        pending = max(16, 4 * receivers * math.ceil(interval / block))
    else:
        pending = _positive_int("maxPendingBlocks", max_pending_blocks)
    return ReceiverStreamConfig(
        kafka=kafka,
        group=group,
        auto_offset_reset=reset,
        topics=_topics(topics),
        batch_interval_s=interval,
        num_receivers=receivers,
        write_ahead_log=bool(write_ahead_log),
        wal_dir=_wal_dir(wal_dir, bool(write_ahead_log)),
        max_rate_per_receiver=rate,
        max_pending_blocks=pending,
        block_interval_s=block,
        include_headers=bool(include_headers),
        retained_batches=_positive_int("retainedBatches", retained_batches),
    )


def _check_receiver_params(params: Mapping[str, Any]) -> None:
    # Said here in the receivers' terms; validate_params says it in the direct stream's.
    group = params.get("group.id")
    if group is None or not str(group).strip():
        raise ConfigurationError(
            "group.id",
            group,
            "a consumer group id",
            "Receivers are members of this consumer group: Kafka assigns them partitions and "
            "they commit to it. Add 'group.id': 'my-app' to kafkaParams.",
        )
    auto = params.get("enable.auto.commit")
    if auto is not None and param_text(auto).strip().lower() != "false":
        raise ConfigurationError(
            "enable.auto.commit",
            auto,
            "'false' or no value",
            "Auto-commit commits offsets before their records are in the write-ahead log, so a "
            "crash loses them. Receivers commit each block's offsets themselves, after the block "
            "is logged. Remove the key.",
        )


def _topics(topics: object) -> tuple[str, ...]:
    expected = "a list of topic names (or Spark's {topic: numThreads} dict)"
    if isinstance(topics, str | bytes) or not isinstance(topics, Mapping | list | tuple | set):
        raise ConfigurationError("topics", topics, expected, "For one topic pass ['name'].")
    if isinstance(topics, Mapping):
        for name, threads in topics.items():
            _positive_int(f"topics[{name!r}]", threads)
    names = [str(t).strip() if isinstance(t, str) else t for t in topics]
    bad = [t for t in names if not isinstance(t, str) or not t]
    if bad or not names:
        raise ConfigurationError("topics", topics, expected)
    return tuple(dict.fromkeys(n for n in names if isinstance(n, str)))


def _wal_dir(value: object, durable: bool) -> str | None:
    if value is None:
        if durable:
            raise ConfigurationError(
                "walDir",
                None,
                "a directory path every node of the cluster shares",
                "The write-ahead log holds received blocks until a batch has processed them; "
                "pass walDir='/shared/wal/my-app' (NFS or another mount every node sees), or "
                "writeAheadLog=False to accept losing unprocessed records after a crash.",
            )
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigurationError("walDir", value, "a directory path (str or os.PathLike)")
    path = os.fspath(value)
    if not isinstance(path, str) or "://" in path:
        raise ConfigurationError(
            "walDir",
            value,
            "a POSIX path mounted on every node",
            "hdfs://, s3:// and other URLs are not supported: receivers fsync files, so mount "
            "the storage (NFS, a FUSE mount) and pass the mount's path.",
        )
    if not os.path.isabs(path):
        raise ConfigurationError(
            "walDir",
            value,
            "an absolute path",
            "Receivers and batch tasks run in other processes, in other directories; pass "
            f"os.path.abspath({path!r}).",
        )
    return os.path.normpath(path)


def _positive_int(name: str, value: object) -> int:
    return integer_at_least(name, value, minimum=1)
