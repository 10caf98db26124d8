"""Batch reads: the same options through format("kafka") and format("kafka_direct") on the same
topics give the same rows, whole (headers included), in the same schema."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.differential.both import (
    BASE_TS_MS,
    assert_same_rows,
    assign_json,
    error_of,
    new_name,
    offsets_json,
    produce,
    read_both,
    reader,
    varied,
)

from kafka_direct.testing.broker import create_topic

#: Records per partition: uneven, with an empty partition.
A_SIZES = (9, 4, 0)
B_SIZES = (6, 3)


@dataclass(frozen=True)
class Topics:
    prefix: str
    a: str
    b: str


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> Topics:
    prefix = new_name("diff")
    t = Topics(prefix, f"{prefix}-a", f"{prefix}-b")
    for name, sizes in ((t.a, A_SIZES), (t.b, B_SIZES)):
        create_topic(kafka_bootstrap, name, partitions=len(sizes))
        produce(
            kafka_bootstrap,
            name,
            [r for p, n in enumerate(sizes) for r in varied(p, n, name)],
        )
    return t


def ts(partition: int, i: int) -> int:
    """Timestamp of record ``i`` of ``partition`` (see ``varied``)."""
    return BASE_TS_MS + partition * 1000 + i * 10


Case = Callable[[Topics], dict[str, str]]

SAME_ROWS: dict[str, Case] = {
    "subscribe one topic": lambda t: {"subscribe": t.a},
    "subscribe two topics, headers": lambda t: {
        "subscribe": f"{t.a},{t.b}",
        "includeHeaders": "true",
    },
    "subscribePattern, headers": lambda t: {
        "subscribePattern": f"{t.prefix}-.*",
        "includeHeaders": "true",
    },
    "assign": lambda t: {"assign": assign_json({t.a: [0, 2], t.b: [1]}), "includeHeaders": "true"},
    "earliest to latest by name": lambda t: {
        "subscribe": t.a,
        "startingOffsets": "earliest",
        "endingOffsets": "latest",
    },
    "JSON offsets with -2 and -1": lambda t: {
        "assign": assign_json({t.a: [0, 1, 2], t.b: [0, 1]}),
        "startingOffsets": offsets_json({t.a: {0: 2, 1: -2, 2: -2}, t.b: {0: -2, 1: 1}}),
        "endingOffsets": offsets_json({t.a: {0: 7, 1: -1, 2: -1}, t.b: {0: -1, 1: 3}}),
        "includeHeaders": "true",
    },
    "startingOffsetsByTimestamp": lambda t: {
        "assign": assign_json({t.a: [0, 1]}),
        "startingOffsetsByTimestamp": offsets_json({t.a: {0: ts(0, 3) - 5, 1: ts(1, 0)}}),
    },
    "startingOffsetsByTimestamp past the end, strategy latest": lambda t: {
        "subscribe": t.a,
        "startingOffsetsByTimestamp": offsets_json(
            {t.a: {0: ts(0, 5), 1: ts(1, 99), 2: BASE_TS_MS}}
        ),
        "startingOffsetsByTimestampStrategy": "latest",
    },
    "startingTimestamp": lambda t: {
        "assign": assign_json({t.a: [0, 1], t.b: [0, 1]}),
        "startingTimestamp": str(ts(0, 4)),
    },
    "endingOffsetsByTimestamp": lambda t: {
        "subscribe": t.b,
        "endingOffsetsByTimestamp": offsets_json({t.b: {0: ts(0, 4), 1: ts(1, 1)}}),
    },
    "startingTimestamp and endingTimestamp": lambda t: {
        "assign": assign_json({t.a: [0, 1]}),
        "startingTimestamp": str(ts(0, 2)),
        "endingTimestamp": str(ts(1, 3)),
    },
    "minPartitions": lambda t: {
        "subscribe": f"{t.a},{t.b}",
        "minPartitions": "7",
        "includeHeaders": "true",
    },
    "maxRecordsPerPartition": lambda t: {
        "subscribe": f"{t.a},{t.b}",
        "maxRecordsPerPartition": "2",
    },
    "minPartitions and maxRecordsPerPartition": lambda t: {
        "subscribe": t.a,
        "minPartitions": "3",
        "maxRecordsPerPartition": "4",
    },
}


@pytest.mark.parametrize("case", list(SAME_ROWS))
def test_same_rows(
    case: str, spark: Any, kafka_bootstrap: str, topics: Topics, record_property: Any
) -> None:
    both = read_both(spark, kafka_bootstrap, SAME_ROWS[case](topics))
    record_property(
        "spark_partitions", f"kafka={both.jvm_partitions} kafka_direct={both.ours_partitions}"
    )
    print(
        f"{case}: {len(both.jvm)} rows; Spark partitions: format('kafka') "
        f"{both.jvm_partitions}, format('kafka_direct') {both.ours_partitions}"
    )
    assert both.jvm, "a case that reads nothing compares nothing"
    assert_same_rows(both)


def test_every_shape_of_record_is_there(spark: Any, kafka_bootstrap: str, topics: Topics) -> None:
    """The data set really has null and empty keys, values and header values."""
    both = read_both(spark, kafka_bootstrap, {"subscribe": topics.a, "includeHeaders": "true"})
    keys = {r[0] for r in both.jvm}
    values = {r[1] for r in both.jvm}
    assert None in keys and b"" in keys and None in values and b"" in values
    headers = {h for r in both.jvm for h in r[7] or ()}
    assert ("h", None) in headers and ("e", b"") in headers
    assert len(both.jvm) == sum(A_SIZES)


#: Options that must be refused (or accepted) by both formats alike.
BOTH_REFUSE: dict[str, Case] = {
    "startingOffsetsByTimestamp on an empty partition, strategy error": lambda t: {
        "subscribe": t.a,
        "startingOffsetsByTimestamp": offsets_json(
            {t.a: {0: ts(0, 3), 1: ts(1, 0), 2: BASE_TS_MS}}
        ),
    },
    "startingTimestamp past the end, strategy error": lambda t: {
        "subscribe": t.a,
        "startingOffsetsByTimestamp": offsets_json(
            {t.a: {0: ts(0, 99), 1: ts(1, 0), 2: BASE_TS_MS}}
        ),
    },
    "startingTimestamp with an empty partition, strategy error": lambda t: {
        "subscribe": t.a,
        "startingTimestamp": str(BASE_TS_MS),
    },
    "startingOffsets latest in a batch": lambda t: {
        "subscribe": t.a,
        "startingOffsets": "latest",
    },
    "endingOffsets earliest in a batch": lambda t: {"subscribe": t.a, "endingOffsets": "earliest"},
    "-1 in startingOffsets JSON of a batch": lambda t: {
        "assign": assign_json({t.a: [0]}),
        "startingOffsets": offsets_json({t.a: {0: -1}}),
    },
    "-2 in endingOffsets JSON": lambda t: {
        "assign": assign_json({t.a: [0]}),
        "endingOffsets": offsets_json({t.a: {0: -2}}),
    },
    "no subscription": lambda t: {},
    "subscribe and assign": lambda t: {"subscribe": t.a, "assign": assign_json({t.a: [0]})},
    "kafka.auto.offset.reset": lambda t: {"subscribe": t.a, "kafka.auto.offset.reset": "latest"},
    "kafka.key.deserializer": lambda t: {"subscribe": t.a, "kafka.key.deserializer": "x"},
    "kafka.value.deserializer": lambda t: {"subscribe": t.a, "kafka.value.deserializer": "x"},
    "kafka.enable.auto.commit": lambda t: {"subscribe": t.a, "kafka.enable.auto.commit": "true"},
    "kafka.interceptor.classes": lambda t: {"subscribe": t.a, "kafka.interceptor.classes": "x"},
    "minPartitions 0": lambda t: {"subscribe": t.a, "minPartitions": "0"},
    "maxRecordsPerPartition 0": lambda t: {"subscribe": t.a, "maxRecordsPerPartition": "0"},
    "empty subscribe": lambda t: {"subscribe": ""},
    "empty subscribePattern": lambda t: {"subscribePattern": ""},
    "startingOffsets JSON missing a partition": lambda t: {
        "assign": assign_json({t.a: [0, 1]}),
        "startingOffsets": offsets_json({t.a: {0: 1}}),
    },
    "startingOffsetsByTimestamp and startingOffsets": lambda t: {
        "subscribe": t.a,
        "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": offsets_json({t.a: {0: BASE_TS_MS}}),
    },
}

#: Options both accept (Spark warns about some of them).
BOTH_ACCEPT: dict[str, Case] = {
    "kafka.group.id": lambda t: {"subscribe": t.a, "kafka.group.id": new_name("g")},
    "groupIdPrefix": lambda t: {"subscribe": t.a, "groupIdPrefix": "diff"},
    "maxOffsetsPerTrigger in a batch": lambda t: {"subscribe": t.a, "maxOffsetsPerTrigger": "1"},
    "failOnDataLoss false": lambda t: {"subscribe": t.a, "failOnDataLoss": "false"},
    "kafkaConsumer.pollTimeoutMs": lambda t: {
        "subscribe": t.a,
        "kafkaConsumer.pollTimeoutMs": "30000",
    },
    "unknown option": lambda t: {"subscribe": t.a, "someOptionNobodyKnows": "1"},
    "fetchOffset.numRetries and retryIntervalMs": lambda t: {
        "subscribe": t.a,
        "fetchOffset.numRetries": "5",
        "fetchOffset.retryIntervalMs": "20",
    },
    "stream-only options in a batch": lambda t: {
        "subscribe": t.a,
        "minOffsetsPerTrigger": "5",
        "maxTriggerDelay": "1s",
    },
    "kafka.isolation.level read_committed": lambda t: {
        "subscribe": t.a,
        "kafka.isolation.level": "read_committed",
    },
}


def _outcome(spark: Any, bootstrap: str, fmt: str, options: dict[str, str]) -> str | None:
    return error_of(lambda: reader(spark, fmt, bootstrap, options).load().collect())


@pytest.mark.parametrize("case", list(BOTH_REFUSE))
def test_both_refuse(case: str, spark: Any, kafka_bootstrap: str, topics: Topics) -> None:
    options = BOTH_REFUSE[case](topics)
    jvm = _outcome(spark, kafka_bootstrap, "kafka", options)
    ours = _outcome(spark, kafka_bootstrap, "kafka_direct", options)
    print(f"{case}:\n  kafka:        {jvm}\n  kafka_direct: {ours}")
    assert jvm is not None, f"format('kafka') accepted {options}"
    assert ours is not None, f"format('kafka_direct') accepted {options}; kafka said {jvm}"


@pytest.mark.parametrize("case", list(BOTH_ACCEPT))
def test_both_accept(case: str, spark: Any, kafka_bootstrap: str, topics: Topics) -> None:
    options = BOTH_ACCEPT[case](topics)
    assert _outcome(spark, kafka_bootstrap, "kafka", options) is None
    assert _outcome(spark, kafka_bootstrap, "kafka_direct", options) is None


def test_deleted_records_with_fail_on_data_loss_false(spark: Any, kafka_bootstrap: str) -> None:
    """Records deleted below the requested start: both start at the log start, no error."""
    topic = new_name("diff-deleted")
    create_topic(kafka_bootstrap, topic, partitions=2)
    produce(kafka_bootstrap, topic, varied(0, 10, topic) + varied(1, 5, topic))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 2)])
    for f in futures.values():
        f.result(30)
    options = {
        "assign": assign_json({topic: [0, 1]}),
        "startingOffsets": offsets_json({topic: {0: 3, 1: -2}}),
        "failOnDataLoss": "false",
        "includeHeaders": "true",
    }
    both = read_both(spark, kafka_bootstrap, options)
    assert [(r[3], r[4]) for r in both.jvm] == [(0, o) for o in range(6, 10)] + [
        (1, o) for o in range(2, 5)
    ]
    assert_same_rows(both)


#: kafka.* keys only kafka_direct refuses (docs/deviations.md says why): the JVM passes them to
#: the Java consumer, which ignores the serializers and does not know the librdkafka key.
ONLY_OURS_REFUSE: dict[str, Case] = {
    "kafka.key.serializer on a source": lambda t: {"subscribe": t.a, "kafka.key.serializer": "x"},
    "kafka.enable.partition.eof": lambda t: {
        "subscribe": t.a,
        "kafka.enable.partition.eof": "true",
    },
}


@pytest.mark.parametrize("case", list(ONLY_OURS_REFUSE))
def test_only_kafka_direct_refuses(
    case: str, spark: Any, kafka_bootstrap: str, topics: Topics
) -> None:
    options = ONLY_OURS_REFUSE[case](topics)
    assert _outcome(spark, kafka_bootstrap, "kafka", options) is None
    assert _outcome(spark, kafka_bootstrap, "kafka_direct", options) is not None
