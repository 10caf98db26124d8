"""The DStream-style API's configuration: ``kafkaParams``, rates, and the batch-source options a
stream passes on; for the receiver stream (``createStream``) its arguments and the receivers'
consumer config. Pure: plain library (no Spark, no Kafka client), used by the Spark driver.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kafka_direct.config.clients import executor_consumer_config
from kafka_direct.config.defaults import SOURCE_OWNED_KAFKA_KEYS
from kafka_direct.config.kafka import KafkaConfig, redact, refuse_jvm_settings
from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError
from kafka_direct.offsets import TopicPartition

__all__ = [
    "AutoOffsetReset",
    "RateFunction",
    "ReceiverStreamConfig",
    "non_negative",
    "positive",
    "probe_consumer_config",
    "rate_function",
    "receiver_consumer_config",
    "receiver_stream_config",
    "stream_source_options",
    "validate_params",
]

#: Records per second for a partition (Spark's ``PerPartitionConfig.maxRatePerPartition``).
RateFunction = Callable[[TopicPartition], float]

AutoOffsetReset = Literal["earliest", "latest", "none"]

#: librdkafka's spellings and the Java client's, mapped to the Java meaning.
_RESET_VALUES: dict[str, AutoOffsetReset] = {
    "earliest": "earliest",
    "smallest": "earliest",
    "beginning": "earliest",
    "latest": "latest",
    "largest": "latest",
    "end": "latest",
    "none": "none",
    "error": "none",
}

#: Keys the stream handles itself (the rest of SOURCE_OWNED_KAFKA_KEYS is refused as in the source).
_STREAM_KEYS = {"auto.offset.reset", "enable.auto.commit", "group.id"}


def validate_params(
    params: Mapping[str, Any], *, require_group: bool = True
) -> tuple[KafkaConfig, str, AutoOffsetReset]:
    """Check ``kafkaParams``; return the client settings, the group id and the reset policy.

    ``require_group=False`` is for one-off reads (``createRDD``), which commit nothing.
    """
    if not isinstance(params, Mapping):
        raise ConfigurationError("kafkaParams", type(params).__name__, "a dict of librdkafka keys")
    config = {str(k): _param_text(v) for k, v in params.items() if v is not None}
    refuse_jvm_settings(config, prefix="")
    if not config.get("bootstrap.servers", "").strip():
        raise ConfigurationError(
            "bootstrap.servers",
            config.get("bootstrap.servers"),
            "a comma-separated list of host:port",
            "Add 'bootstrap.servers': 'host1:9092,host2:9092' to kafkaParams.",
        )
    group = config.get("group.id", "").strip()
    if not group and require_group:
        raise ConfigurationError(
            "group.id",
            config.get("group.id"),
            "a consumer group id",
            "The stream commits the offsets you pass to commitAsync for this group (or to your "
            "offsetStore under it); add 'group.id': 'my-app' to kafkaParams.",
        )
    if config.get("enable.auto.commit", "false").strip().lower() != "false":
        raise ConfigurationError(
            "enable.auto.commit",
            config["enable.auto.commit"],
            "'false' or no value",
            "Auto-commit would commit offsets before your function has processed them, which "
            "loses data after a failure. The stream commits only what you pass to "
            "stream.commitAsync(offsetRanges), after your function returns. Remove the key.",
        )
    raw_reset = config.get("auto.offset.reset", "latest").strip().lower()
    if raw_reset not in _RESET_VALUES:
        raise ConfigurationError(
            "auto.offset.reset", config["auto.offset.reset"], "'earliest', 'latest' or 'none'"
        )
    for key, value in config.items():
        if key in SOURCE_OWNED_KAFKA_KEYS and key not in _STREAM_KEYS:
            shown = redact({key: value})[key]
            raise UnsupportedKafkaOptionError(key, shown, SOURCE_OWNED_KAFKA_KEYS[key])
    level = config.get("isolation.level")
    if level is not None and level not in ("read_committed", "read_uncommitted"):
        raise ConfigurationError("isolation.level", level, "'read_committed' or 'read_uncommitted'")
    kafka = KafkaConfig({k: v for k, v in config.items() if k not in _STREAM_KEYS})
    return kafka, group, _RESET_VALUES[raw_reset]


def _param_text(value: object) -> str:
    # Scala's kafkaParams are Map[String, Object]: accept ints and booleans the same way.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: Batch-source options a direct stream may pass on; the others are the stream's own business.
_PASS_THROUGH = {
    name.lower(): name
    for name in (
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "fetchOffset.unavailableTimeout",
        "minPartitions",
        "maxRecordsPerPartition",
        "maxRecordsPerTask",
        "groupIdPrefix",
        "consumerCache.enabled",
        "consumerCache.capacity",
        "consumerCache.timeoutMs",
        "arrowBatchSize",
        "fastPath.enabled",
        "pushdown.enabled",
    )
}


def stream_source_options(raw: Mapping[str, str] | None) -> SourceOptions:
    """Validate the batch-source options a stream passes on (refusing the stream's own)."""
    options = {str(k): str(v) for k, v in dict(raw or {}).items()}
    for key in options:
        if key.lower() not in _PASS_THROUGH:
            raise ConfigurationError(
                f"sourceOptions['{key}']",
                options[key],
                "one of " + ", ".join(sorted(_PASS_THROUGH.values())),
                "Kafka client settings belong in kafkaParams; offsets, rates and failOnDataLoss "
                "are arguments of createDirectStream.",
            )
    probe = {"kafka.bootstrap.servers": "probe:9092", "assign": '{"probe": [0]}', **options}
    return parse_source_options(probe, streaming=False)


def probe_consumer_config(kafka: Mapping[str, str]) -> dict[str, str]:
    """A consumer config like the executors' for ``kafka``, to let librdkafka check it."""
    return executor_consumer_config(
        kafka,
        group_id="kafka-direct-config-check",
        isolation_level=kafka.get("isolation.level", "read_uncommitted"),
    )


def rate_function(value: float | Mapping[Any, float] | RateFunction | None) -> RateFunction:
    if value is None:
        return lambda _tp: 0.0
    if callable(value):
        fn = value

        def checked(tp: TopicPartition) -> float:
            rate = fn(tp)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or math.isnan(rate):
                raise ConfigurationError("maxRatePerPartition", rate, f"a number for {tp}")
            return float(rate)

        return checked
    if isinstance(value, Mapping):
        rates: dict[TopicPartition, float] = {}
        for key, rate in value.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ConfigurationError("maxRatePerPartition", key, "TopicPartition keys")
            rates[TopicPartition(*key)] = non_negative("maxRatePerPartition", rate)
        return lambda tp: rates.get(tp, 0.0)
    rate = non_negative("maxRatePerPartition", value)
    return lambda _tp: rate


def positive(name: str, value: object, unit: str) -> float:
    number = non_negative(name, value)
    if number <= 0:
        raise ConfigurationError(name, value, f"a number > 0 ({unit})")
    return number


def non_negative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(name, value, "a number >= 0")
    if math.isinf(value):
        raise ConfigurationError(name, value, "a finite number")
    return float(value)


# -- the receiver stream (createStream) ------------------------------------------------------

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
    if auto is not None and _param_text(auto).strip().lower() != "false":
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
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(name, value, "an integer >= 1")
    return value


def receiver_consumer_config(config: ReceiverStreamConfig, receiver_id: int) -> dict[str, str]:
    """librdkafka consumer config of one receiver: a member of the user's group."""
    settings = dict(config.kafka)
    tunables = {
        # The prefetch queue is most of a receiver's memory: bounded, so that memory stays flat
        # however far the stream falls behind (librdkafka's default allows 64 MB).
        "queued.max.messages.kbytes": "16384",
        # Default 1000 ms: a receiver that drains its queue quickly must not stall for that long.
        "fetch.queue.backoff.ms": "10",
        "client.id": f"kafka-direct-receiver-{receiver_id}",
    }
    for key, value in tunables.items():
        settings.setdefault(key, value)
    settings.update(
        {
            # The user's group: Kafka assigns the receivers partitions and keeps their offsets.
            "group.id": config.group,
            # A block's offsets are committed by the receiver, after the block is logged.
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": _LIBRDKAFKA_RESET[config.auto_offset_reset],
            # As Spark's Java consumer (librdkafka defaults to read_committed).
            "isolation.level": config.kafka.get("isolation.level", "read_uncommitted"),
        }
    )
    return settings
