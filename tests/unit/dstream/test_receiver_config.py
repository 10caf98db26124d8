"""``KafkaUtils.createStream``'s arguments (kafka_direct.config.receiver.receiver_stream_config):
each mistake is a ConfigurationError naming the argument, the value, what was expected and how
to fix it; secrets never appear. Pure: no broker, no Spark (checked before Spark is touched)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from kafka_direct.config.receiver import receiver_stream_config
from kafka_direct.dstream.kafka_utils import KafkaUtils
from kafka_direct.errors import ConfigurationError, UnsupportedKafkaOptionError

PARAMS = {"bootstrap.servers": "b:9092", "group.id": "g", "sasl.password": "hunter2"}
WAL = os.path.abspath("/shared/wal")


def config(params: Any = None, topics: Any = ("t",), **overrides: Any) -> Any:
    args: dict[str, Any] = {
        "batch_interval": 2.0,
        "num_receivers": 2,
        "write_ahead_log": True,
        "wal_dir": WAL,
        "max_rate_per_receiver": None,
        "max_pending_blocks": None,
        "block_interval": 0.2,
        "include_headers": False,
        "retained_batches": 100,
    }
    args.update(overrides)
    return receiver_stream_config(PARAMS if params is None else params, topics, **args)


@pytest.mark.parametrize(
    ("params", "topics", "overrides", "option", "says"),
    [
        ({"bootstrap.servers": "b:9092"}, ["t"], {}, "group.id", "Receivers are members"),
        (
            {**PARAMS, "enable.auto.commit": True},
            ["t"],
            {},
            "enable.auto.commit",
            "before their records are in the write-ahead log",
        ),
        (
            {**PARAMS, "auto.offset.reset": "sometimes"},
            ["t"],
            {},
            "auto.offset.reset",
            "'earliest'",
        ),
        (PARAMS, "events", {}, "topics", "For one topic pass ['name']"),
        (PARAMS, [], {}, "topics", "a list of topic names"),
        (PARAMS, ["t", ""], {}, "topics", "a list of topic names"),
        (PARAMS, {"t": 0}, {}, "topics['t']", "an integer >= 1"),
        (PARAMS, ["t"], {"num_receivers": 0}, "numReceivers", "an integer >= 1"),
        (PARAMS, ["t"], {"num_receivers": True}, "numReceivers", "an integer >= 1"),
        (PARAMS, ["t"], {"batch_interval": 0}, "batchInterval", "a number > 0"),
        (PARAMS, ["t"], {"block_interval": 5.0}, "blockInterval", "at most batchInterval"),
        (PARAMS, ["t"], {"write_ahead_log": "yes"}, "writeAheadLog", "True or False"),
        (PARAMS, ["t"], {"include_headers": 1}, "includeHeaders", "True or False"),
        (PARAMS, ["t"], {"wal_dir": None}, "walDir", "writeAheadLog=False to accept losing"),
        (PARAMS, ["t"], {"wal_dir": "wal"}, "walDir", "os.path.abspath('wal')"),
        (PARAMS, ["t"], {"wal_dir": "hdfs://nn/wal"}, "walDir", "mount the storage"),
        (PARAMS, ["t"], {"wal_dir": 42}, "walDir", "a directory path"),
        (PARAMS, ["t"], {"max_rate_per_receiver": -1}, "maxRatePerReceiver", "a number >= 0"),
        (PARAMS, ["t"], {"max_pending_blocks": 0}, "maxPendingBlocks", "an integer >= 1"),
        (PARAMS, ["t"], {"retained_batches": 0}, "retainedBatches", "an integer >= 1"),
    ],
)
def test_each_bad_argument_is_named_with_its_fix(
    params: Any, topics: Any, overrides: dict[str, Any], option: str, says: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        config(params, topics, **overrides)
    assert info.value.option == option
    assert says in str(info.value)
    assert "hunter2" not in str(info.value)


def test_keys_the_receivers_own_are_refused_as_in_the_source() -> None:
    with pytest.raises(UnsupportedKafkaOptionError, match=r"enable\.partition\.eof"):
        config({**PARAMS, "enable.partition.eof": "true"})


def test_defaults_and_spark_shapes() -> None:
    c = config(topics={"a": 2, "b": 1})  # Scala's {topic: numThreads}
    assert c.topics == ("a", "b")
    assert c.max_rate_per_receiver == 0  # no limit
    # Four batches' worth of blocks: 2 receivers x 2 s / 0.2 s x 4.
    assert c.max_pending_blocks == 80
    assert config(batch_interval=0.2, num_receivers=1).max_pending_blocks == 16  # the floor
    assert config(write_ahead_log=False, wal_dir=None).wal_dir is None  # a scratch dir at start
    assert config(wal_dir=WAL + "/x/..").wal_dir == WAL


def test_receivers_are_members_of_the_users_group_that_never_auto_commit() -> None:
    c = config({**PARAMS, "auto.offset.reset": "none", "queued.max.messages.kbytes": "1024"})
    settings = c.consumer_config(3)
    assert settings["group.id"] == "g"
    assert settings["enable.auto.commit"] == "false"
    assert settings["auto.offset.reset"] == "error"  # librdkafka's 'none'
    assert settings["isolation.level"] == "read_uncommitted"
    assert settings["client.id"] == "kafka-direct-receiver-3"
    assert settings["queued.max.messages.kbytes"] == "1024"  # the user's choice is kept
    assert settings["sasl.password"] == "hunter2"  # handed to librdkafka, never printed
    assert "hunter2" not in repr(c)


def test_create_stream_checks_its_arguments_before_touching_spark() -> None:
    with pytest.raises(ConfigurationError, match="numReceivers"):
        KafkaUtils.createStream(None, PARAMS, ["t"], batchInterval=1.0, numReceivers=0, walDir=WAL)
    with pytest.raises(ConfigurationError, match="'spark'"):
        KafkaUtils.createStream(None, PARAMS, ["t"], batchInterval=1.0, walDir=WAL)


def test_spark_connect_is_refused_at_start_naming_the_alternative() -> None:
    from kafka_direct.dstream.receiver.supervisor import ReceiverSupervisor

    class ConnectSession:
        @property
        def sparkContext(self) -> Any:
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported")

    with pytest.raises(ConfigurationError, match="createDirectStream") as info:
        ReceiverSupervisor(ConnectSession(), config(), "/tmp/wal", "run", on_failure=print)
    assert info.value.option == "spark"
