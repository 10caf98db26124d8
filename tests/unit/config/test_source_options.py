"""Unit tests for kafka_direct.options and kafka_direct.settings: table-style, no broker, no Spark.

The refusal table is the contract "every refused or invalid option has a test of its message": each
row names the option the message must name, the offending value it must show, and a phrase that
tells the user what to do. Cases marked "Spark:" mirror a check of Spark's KafkaSourceProvider.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from collections.abc import Mapping
from typing import Any

import pytest

from kafka_direct.config.clients import admin_config, executor_consumer_config, executor_group_id
from kafka_direct.config.defaults import OPTION_DEFAULTS, SOURCE_OWNED_KAFKA_KEYS, parse_duration_ms
from kafka_direct.config.kafka import REDACTED, KafkaConfig, redact
from kafka_direct.config.source import SourceOptions, parse_source_options
from kafka_direct.errors import ConfigurationError, KafkaDirectError, UnsupportedKafkaOptionError
from kafka_direct.offsets import TopicPartition

BOOTSTRAP = {"kafka.bootstrap.servers": "broker1:9092,broker2:9092"}
SUB = {**BOOTSTRAP, "subscribe": "t"}
ASSIGN_T0 = {**BOOTSTRAP, "assign": '{"t": [0]}'}
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def parse(raw: Mapping[str, str], streaming: bool | None = True) -> SourceOptions:
    return parse_source_options(raw, streaming=streaming)


def refusal(
    raw: Mapping[str, str],
    streaming: bool | None,
    error: type[ConfigurationError] = ConfigurationError,
) -> ConfigurationError:
    with pytest.raises(error) as info:
        parse(raw, streaming)
    return info.value


# --- refused options: type, option named, value shown, what to do ---------------------------------


def _p(
    raw: Mapping[str, str],
    streaming: bool | None,
    option: str,
    shown: str,
    hint: str,
    id: str,
) -> Any:
    return pytest.param(raw, streaming, option, shown, hint, id=id)


INT_OPTIONS_MIN_1 = [
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxOffsetsPerPartitionPerTrigger",
    "minPartitions",
    "maxRecordsPerPartition",
    "kafkaConsumer.pollTimeoutMs",
    "consumerCache.capacity",
    "arrowBatchSize",
    "maxRecordsPerTask",
    "fetchOffset.numRetries",
]
INT_OPTIONS_MIN_0 = [
    "fetchOffset.retryIntervalMs",
    "consumerCache.timeoutMs",
]

INVALID_CASES = [
    # -- strategy -----------------------------------------------------------------------------
    _p(BOOTSTRAP, True, "subscribe/subscribePattern/assign", "<not set>",
       "Choose one way to name the partitions", id="Spark: no strategy"),
    _p({**SUB, "assign": '{"t": [0]}'}, True, "subscribe/subscribePattern/assign",
       "'subscribe, assign'", "remove the others", id="Spark: two strategies"),
    _p({**SUB, "subscribePattern": "t.*", "assign": '{"t": [0]}'}, False,
       "subscribe/subscribePattern/assign", "'subscribe, subscribePattern, assign'",
       "remove the others", id="three strategies"),
    _p({**BOOTSTRAP, "subscribe": ""}, True, "subscribe", "got ''",
       "a comma-separated list of topics", id="Spark: empty subscribe"),
    _p({**BOOTSTRAP, "subscribe": " , ,"}, True, "subscribe", "got ', ,'",
       "a comma-separated list of topics", id="subscribe of commas only"),
    _p({**BOOTSTRAP, "subscribePattern": ""}, True, "subscribePattern", "got ''",
       "a non-empty regular expression", id="Spark: empty subscribePattern"),
    _p({**BOOTSTRAP, "subscribePattern": "events-("}, True, "subscribePattern", "'events-('",
       "It fails with: missing ), unterminated subpattern", id="invalid subscribePattern regex"),
    # Spark compiles the pattern as a Java regex: what Python lacks is named in the error...
    _p({**BOOTSTRAP, "subscribePattern": r"\p{Alpha}+-events"}, True, "subscribePattern",
       r"'\\p{Alpha}+-events'", "Spark takes a Java regular expression (java.util.regex), "
       "which kafka_direct matches with Python's re. Python lacks Java's \\p{...} classes",
       id="Java: \\p{...}"),
    _p({**BOOTSTRAP, "subscribePattern": r"\Qorders.eu\E"}, True, "subscribePattern",
       "bad escape \\Q", "\\Q...\\E quoting (escape each character with \\ instead)",
       id="Java: \\Q...\\E"),
    # ... and what Python reads otherwise (a FutureWarning, and another meaning) is refused.
    _p({**BOOTSTRAP, "subscribePattern": "events-[a-z&&[^x]]"}, True, "subscribePattern",
       "'events-[a-z&&[^x]]'", "It has '&&' inside a character class at position 11 (Java's "
       "class intersection). Spark takes a Java regular expression", id="Java: &&"),
    _p({**BOOTSTRAP, "subscribePattern": "events-[a-c[x-z]]"}, True, "subscribePattern",
       "'events-[a-c[x-z]]'", "'[' inside a character class at position 11 (Java's class union)",
       id="Java: nested class"),
    _p({**BOOTSTRAP, "assign": '{"t": [0'}, True, "assign", "'{\"t\": [0'",
       "The JSON is malformed: Expecting ',' delimiter at character 8",
       id="malformed assign JSON"),
    _p({**BOOTSTRAP, "assign": ""}, True, "assign", "got ''",
       "The JSON is malformed", id="empty assign"),
    _p({**BOOTSTRAP, "assign": '{"t": [-1]}'}, True, "assign", "'{\"t\": [-1]}'",
       "with partitions >= 0", id="assign negative partition"),
    _p({**BOOTSTRAP, "assign": '{"t": ["0"]}'}, True, "assign", "'{\"t\": [\"0\"]}'",
       "with partitions >= 0", id="assign string partition"),
    _p({**BOOTSTRAP, "assign": '{"t": [1.5]}'}, True, "assign", "'{\"t\": [1.5]}'",
       "with partitions >= 0", id="assign float partition"),
    _p({**BOOTSTRAP, "assign": '{"t": [true]}'}, True, "assign", "'{\"t\": [true]}'",
       "with partitions >= 0", id="assign boolean partition"),
    _p({**BOOTSTRAP, "assign": '{"t": []}'}, True, "assign", "'{\"t\": []}'",
       "with a non-empty list per topic", id="assign empty partition list"),
    _p({**BOOTSTRAP, "assign": '{"t": 0}'}, True, "assign", "'{\"t\": 0}'",
       "with a non-empty list per topic", id="assign partitions not a list"),
    _p({**BOOTSTRAP, "assign": "[0, 1]"}, True, "assign", "'[0, 1]'",
       'such as {"topicA": [0, 1]}', id="assign JSON list, not object"),
    _p({**BOOTSTRAP, "assign": "{}"}, True, "assign", "'{}'",
       'such as {"topicA": [0, 1]}', id="assign empty object"),
    # -- kafka.* ------------------------------------------------------------------------------
    _p({"subscribe": "t"}, True, "kafka.bootstrap.servers", "<not set>",
       "Set .option('kafka.bootstrap.servers', 'host1:9092,host2:9092')",
       id="Spark: missing kafka.bootstrap.servers"),
    _p({"subscribe": "t", "kafka.bootstrap.servers": " "}, False, "kafka.bootstrap.servers",
       "got ' '", "Set .option('kafka.bootstrap.servers'", id="blank kafka.bootstrap.servers"),
    _p({**SUB, "kafka.isolation.level": "read_comitted"}, True, "kafka.isolation.level",
       "'read_comitted'", "'read_committed' or 'read_uncommitted'", id="bad isolation.level"),
    # -- startingOffsets ----------------------------------------------------------------------
    _p({**SUB, "startingOffsets": "latest"}, False, "startingOffsets", "'latest'",
       "use it with readStream", id="Spark: startingOffsets=latest in batch"),
    _p({**SUB, "startingOffsets": "LATEST"}, False, "startingOffsets", "'LATEST'",
       "use it with readStream", id="startingOffsets=LATEST in batch"),
    _p({**SUB, "startingOffsets": "beginning"}, True, "startingOffsets", "'beginning'",
       "'earliest', 'latest', 'committed' or JSON", id="startingOffsets garbage"),
    _p({**SUB, "startingOffsets": ""}, True, "startingOffsets", "got ''",
       "'earliest', 'latest', 'committed' or JSON", id="startingOffsets empty"),
    _p({**SUB, "startingOffsets": '{"t": {"0": 1'}, True, "startingOffsets",
       "'{\"t\": {\"0\": 1'", "The JSON is malformed: Expecting ',' delimiter at character 13",
       id="malformed startingOffsets JSON shows the position"),
    _p({**SUB, "startingOffsets": '{"t": {"0": 1,}}'}, True, "startingOffsets",
       "'{\"t\": {\"0\": 1,}}'", "at character 14", id="startingOffsets trailing comma"),
    _p({**SUB, "startingOffsets": '{"t": {"0": -3}}'}, True, "startingOffsets",
       "'{\"t\": {\"0\": -3}}'", "an offset >= 0, -2 (earliest) or -1 (latest) for t-0",
       id="Spark: startingOffsets offset < -2"),
    _p({**SUB, "startingOffsets": '{"t": {"0": -1}}'}, False, "startingOffsets",
       "'{\"t\": {\"0\": -1}}'", "an offset >= 0 or -2 (earliest) for t-0",
       id="Spark: startingOffsets -1 (latest) in batch"),
    _p({**SUB, "startingOffsets": '{"t": {"0": "5"}}'}, True, "startingOffsets",
       "{'t': {'0': '5'}}", "with integer offsets", id="startingOffsets string offset"),
    _p({**SUB, "startingOffsets": '{"t": {"x": 5}}'}, True, "startingOffsets",
       "{'t': {'x': 5}}", "with integer partitions", id="startingOffsets non-integer partition"),
    _p({**SUB, "startingOffsets": '{"t": {"-1": 5}}'}, True, "startingOffsets",
       "{'t': {'-1': 5}}", "with partitions >= 0", id="startingOffsets negative partition"),
    _p({**SUB, "startingOffsets": '{"t": [5]}'}, True, "startingOffsets",
       "{'t': [5]}", 'objects, e.g. {"t": {"0": 42}}', id="startingOffsets partitions as list"),
    # -- endingOffsets ------------------------------------------------------------------------
    _p({**SUB, "endingOffsets": "earliest"}, False, "endingOffsets", "'earliest'",
       "'earliest' would make every range empty", id="Spark: endingOffsets=earliest"),
    _p({**SUB, "endingOffsets": "earliest"}, None, "endingOffsets", "'earliest'",
       "'earliest' would make every range empty", id="endingOffsets=earliest, mode unknown"),
    _p({**SUB, "endingOffsets": "end"}, False, "endingOffsets", "'end'",
       "'latest' or per-partition JSON", id="endingOffsets garbage"),
    _p({**SUB, "endingOffsets": '{"t": {"0": -2}}'}, False, "endingOffsets",
       "'{\"t\": {\"0\": -2}}'", "-2 (earliest) given for t-0",
       id="Spark: endingOffsets JSON with -2"),
    _p({**SUB, "endingOffsets": '{"t": {"0": -7}}'}, False, "endingOffsets",
       "'{\"t\": {\"0\": -7}}'", "-1 (latest) for t-0", id="endingOffsets JSON with -7"),
    _p({**SUB, "endingOffsets": "latest"}, True, "endingOffsets", "'latest'",
       "A stream has no end", id="Spark: endingOffsets on a stream"),
    _p({**SUB, "endingOffsetsByTimestamp": '{"t": {"0": 1}}'}, True, "endingOffsetsByTimestamp",
       "'{\"t\": {\"0\": 1}}'", "A stream has no end",
       id="Spark: endingOffsetsByTimestamp on a stream"),
    # -- timestamps ---------------------------------------------------------------------------
    _p({**SUB, "startingTimestamp": "-1"}, True, "startingTimestamp", "'-1'",
       "epoch milliseconds as an integer >= 0", id="negative startingTimestamp"),
    _p({**SUB, "startingTimestamp": "yesterday"}, True, "startingTimestamp", "'yesterday'",
       "epoch milliseconds as an integer >= 0", id="non-integer startingTimestamp"),
    _p({**SUB, "endingTimestamp": "-5"}, False, "endingTimestamp", "'-5'",
       "epoch milliseconds as an integer >= 0", id="negative endingTimestamp"),
    _p({**SUB, "startingOffsetsByTimestamp": '{"t": {"0": -1}}'}, True,
       "startingOffsetsByTimestamp", "'{\"t\": {\"0\": -1}}'", "a timestamp >= 0 for t-0",
       id="negative startingOffsetsByTimestamp"),
    _p({**SUB, "startingOffsetsByTimestamp": '{"t":'}, True, "startingOffsetsByTimestamp",
       "'{\"t\":'", "The JSON is malformed: Expecting value at character 5",
       id="malformed startingOffsetsByTimestamp"),
    _p({**SUB, "endingOffsetsByTimestamp": '{"t": {"0": -1}}'}, False,
       "endingOffsetsByTimestamp", "'{\"t\": {\"0\": -1}}'", "a timestamp >= 0 for t-0",
       id="negative endingOffsetsByTimestamp"),
    _p({**SUB, "startingOffsetsByTimestampStrategy": "Maybe"}, True,
       "startingOffsetsByTimestampStrategy", "'Maybe'", "'error' or 'latest'",
       id="Spark: bad startingOffsetsByTimestampStrategy shows the value as given"),
    # -- admission control and tuning ---------------------------------------------------------
    *[
        _p({**SUB, name: value}, True, name, f"'{value}'", "an integer >= 1",
           id=f"{name}={value}")
        for name in INT_OPTIONS_MIN_1
        for value in ("-1", "0", "1.5", "ten")
    ],
    *[
        _p({**SUB, name: value}, True, name, f"'{value}'", "an integer >= 0",
           id=f"{name}={value}")
        for name in INT_OPTIONS_MIN_0
        for value in ("-1", "1e3")
    ],
    _p({**SUB, "fetchOffset.numRetries": "0"}, True, "fetchOffset.numRetries", "'0'",
       "an integer >= 1: the number of attempts, as Spark counts it. Set 1 for a single "
       "attempt", id="Spark: fetchOffset.numRetries=0 makes no attempt"),
    _p({**SUB, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, True,
       "minOffsetsPerTrigger", "'10'",
       "a value <= maxOffsetsPerTrigger (5). Lower minOffsetsPerTrigger or raise",
       id="Spark: minOffsetsPerTrigger > maxOffsetsPerTrigger"),
    *[
        _p({**SUB, "maxTriggerDelay": value}, True, "maxTriggerDelay", f"'{value}'",
           "a duration such as '15m', '30s' or '500ms'", id=f"maxTriggerDelay={value!r}")
        for value in ("soon", "-5s", "1.5s", "5 parsecs", "")
    ],
    # -- booleans and the rest ----------------------------------------------------------------
    *[
        _p({**SUB, name: value}, True, name, f"'{value}'", "'true' or 'false'",
           id=f"{name}={value}")
        for name, value in [
            ("failOnDataLoss", "yes"),
            ("failOnDataLoss", "0"),
            ("includeHeaders", "1"),
            ("consumerCache.enabled", "on"),
            ("fastPath.enabled", "native"),
        ]
    ],
    _p({**SUB, "groupIdPrefix": " "}, True, "groupIdPrefix", "got ''", "a non-empty string",
       id="blank groupIdPrefix"),
    # -- typos --------------------------------------------------------------------------------
    _p({**SUB, "startingOffset": "earliest"}, True, "startingoffset", "'earliest'",
       "Did you mean 'startingOffsets'?", id="typo startingOffset"),
    _p({**BOOTSTRAP, "subscibe": "t"}, True, "subscibe", "'t'",
       "Did you mean 'subscribe'?", id="typo subscibe"),
    _p({**SUB, "FAILONDATALOS": "false"}, True, "failondatalos", "'false'",
       "Did you mean 'failOnDataLoss'?", id="typo FAILONDATALOS, upper case"),
    _p({**SUB, "maxOffsetPerTrigger": "10"}, True, "maxoffsetpertrigger", "'10'",
       "Did you mean 'maxOffsetsPerTrigger'?", id="typo maxOffsetPerTrigger"),
    # -- offsets vs assign --------------------------------------------------------------------
    _p({**ASSIGN_T0, "startingOffsets": '{"t": {"0": 1, "1": 5}}'}, True, "startingOffsets",
       "'t-1'", "Add them to 'assign' or remove them from the offsets",
       id="Spark: startingOffsets names a partition not in assign"),
    _p({**ASSIGN_T0, "endingOffsets": '{"u": {"0": 5}}'}, False, "endingOffsets",
       "'u-0'", "Add them to 'assign'", id="endingOffsets names a topic not in assign"),
    _p({**ASSIGN_T0, "startingOffsetsByTimestamp": '{"t": {"2": 5}}'}, True,
       "startingOffsetsByTimestamp", "'t-2'", "Add them to 'assign'",
       id="startingOffsetsByTimestamp names a partition not in assign"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "streaming", "option", "shown", "hint"), INVALID_CASES)
def test_refused_option_message(
    raw: dict[str, str], streaming: bool | None, option: str, shown: str, hint: str
) -> None:
    err = refusal(raw, streaming)
    message = str(err)
    assert isinstance(err, KafkaDirectError)
    assert isinstance(err, ValueError)
    assert type(err) is ConfigurationError
    assert err.option == option
    assert f"Invalid option '{option}'" in message
    assert shown in message
    assert hint in message


def test_refusal_table_covers_every_integer_option() -> None:
    # A new integer option must be added to the table above, so its message gets a test too.
    integer_options = {name for name, default in OPTION_DEFAULTS.items() if default.isdigit()} | {
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxOffsetsPerPartitionPerTrigger",
        "minPartitions",
        "maxRecordsPerPartition",
    }
    assert integer_options == set(INT_OPTIONS_MIN_1) | set(INT_OPTIONS_MIN_0)


# --- kafka.* keys the source owns -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "replacement"), sorted(SOURCE_OWNED_KAFKA_KEYS.items()), ids=lambda v: v
)
def test_owned_kafka_key_is_refused_with_its_replacement(key: str, replacement: str) -> None:
    err = refusal({**SUB, f"kafka.{key}": "some-value"}, True, UnsupportedKafkaOptionError)
    assert isinstance(err, ConfigurationError)
    assert err.option == f"kafka.{key}"
    assert f"Invalid option 'kafka.{key}'" in str(err)
    assert "'some-value'" in str(err)
    assert replacement in str(err)
    assert "because the source manages it" in str(err)


@pytest.mark.parametrize(
    ("key", "names"),
    [
        pytest.param("auto.offset.reset", ["'startingOffsets'", "'failOnDataLoss'"], id="reset"),
        pytest.param("enable.auto.commit", ["checkpoint"], id="auto commit"),
        pytest.param("key.deserializer", ["col('key').cast('string')"], id="key deserializer"),
        pytest.param("value.deserializer", ["col('value').cast('string')"], id="value deser."),
        pytest.param("interceptor.classes", ["librdkafka"], id="interceptors"),
    ],
)
def test_owned_kafka_key_replacement_text(key: str, names: list[str]) -> None:
    message = str(refusal({**SUB, f"kafka.{key}": "x"}, True, UnsupportedKafkaOptionError))
    for name in names:
        assert name in message


def test_spark_refused_kafka_keys_are_all_owned() -> None:
    # Spark: KafkaSourceProvider.validateGeneralOptions refuses these kafka.* keys.
    spark_refused = {
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
    }
    assert spark_refused <= set(SOURCE_OWNED_KAFKA_KEYS)


def test_owned_kafka_key_is_refused_whatever_its_case() -> None:
    err = refusal({**SUB, "KAFKA.Auto.Offset.Reset": "earliest"}, True, UnsupportedKafkaOptionError)
    assert err.option == "kafka.auto.offset.reset"


# --- accepted options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("streaming", "attribute", "expected"),
    [
        pytest.param(True, "starting", ("latest", {}, None), id="stream starts at latest"),
        pytest.param(False, "starting", ("earliest", {}, None), id="batch starts at earliest"),
        pytest.param(None, "starting", ("earliest", {}, None), id="unknown mode: earliest"),
        pytest.param(True, "ending", None, id="stream has no end"),
        pytest.param(False, "ending", ("latest", {}, None), id="batch ends at latest"),
        pytest.param(True, "isolation_level", "read_uncommitted", id="isolation like Spark"),
        pytest.param(True, "fail_on_data_loss", True, id="failOnDataLoss true"),
        pytest.param(True, "include_headers", False, id="includeHeaders false"),
        pytest.param(True, "timestamp_strategy", "error", id="timestamp strategy error"),
        pytest.param(True, "reads.poll_timeout_ms", 120_000, id="pollTimeoutMs 120 s"),
        pytest.param(True, "fetch_offset.num_retries", 3, id="fetchOffset.numRetries 3"),
        # Spark's code (KafkaOffsetReaderAdmin) reads 1000, whatever its documentation says.
        pytest.param(True, "fetch_offset.retry_interval_ms", 1000, id="retryIntervalMs 1000"),
        pytest.param(True, "rates.max_offsets", None, id="no maxOffsetsPerTrigger"),
        pytest.param(True, "rates.min_offsets", None, id="no minOffsetsPerTrigger"),
        pytest.param(True, "rates.max_trigger_delay_ms", 900_000, id="maxTriggerDelay 15m"),
        pytest.param(True, "rates.max_offsets_per_partition", None, id="no per-partition"),
        pytest.param(True, "splits.min_partitions", None, id="no minPartitions"),
        pytest.param(True, "splits.max_records_per_partition", None, id="no maxRecords"),
        pytest.param(True, "group_id_prefix", "spark-kafka-source", id="Spark's group prefix"),
        pytest.param(True, "commits.group", None, id="no group"),
        pytest.param(True, "consumer_cache.enabled", True, id="consumer cache on"),
        pytest.param(True, "consumer_cache.capacity", 64, id="consumer cache capacity 64"),
        pytest.param(True, "consumer_cache.timeout_ms", 300_000, id="consumer cache 5 min"),
        pytest.param(True, "reads.batch_size", 20_000, id="arrow batch 20000"),
    ],
)
def test_defaults(streaming: bool | None, attribute: str, expected: Any) -> None:
    value: Any = parse(SUB, streaming)
    for part in attribute.split("."):
        value = getattr(value, part)
    if dataclasses.is_dataclass(value):
        value = (value.kind, value.offsets, value.timestamp)
    assert value == expected


def test_default_isolation_level_is_not_passed_through_as_a_kafka_key() -> None:
    # The default lives in OPTION_DEFAULTS; executors get it explicitly from executor config.
    assert "isolation.level" not in parse(SUB).kafka


@pytest.mark.parametrize(
    ("raw", "attribute", "expected"),
    [
        pytest.param({"STARTINGOFFSETS": "earliest"}, "starting.kind", "earliest", id="UPPER"),
        pytest.param({"StartingOffsets": "EARLIEST"}, "starting.kind", "earliest", id="Mixed"),
        pytest.param({"startingoffsets": "earliest"}, "starting.kind", "earliest", id="lower"),
        pytest.param({"FailOnDataLoss": "FALSE"}, "fail_on_data_loss", False, id="boolean"),
        pytest.param({"INCLUDEHEADERS": "True"}, "include_headers", True, id="headers"),
        pytest.param({"maxoffsetspertrigger": "7"}, "rates.max_offsets", 7, id="max"),
        pytest.param({"KAFKACONSUMER.POLLTIMEOUTMS": "5"}, "reads.poll_timeout_ms", 5, id="dotted"),
        pytest.param(
            {"startingOffsetsByTimestampStrategy": "LATEST"},
            "timestamp_strategy",
            "latest",
            id="strategy value",
        ),
        pytest.param(
            {"MAXTRIGGERDELAY": "2H"}, "rates.max_trigger_delay_ms", 7_200_000, id="delay"
        ),
    ],
)
def test_option_names_are_case_insensitive(
    raw: dict[str, str], attribute: str, expected: object
) -> None:
    value: Any = parse({**SUB, **raw})
    for part in attribute.split("."):
        value = getattr(value, part)
    assert value == expected


def test_strategy_and_bootstrap_are_case_insensitive() -> None:
    opts = parse({"SUBSCRIBE": "t", "KAFKA.BOOTSTRAP.SERVERS": "b:9092"})
    assert (opts.strategy.kind, opts.strategy.topics, opts.bootstrap_servers) == (
        "subscribe",
        ("t",),
        "b:9092",
    )


@pytest.mark.parametrize(
    ("raw", "kind", "topics", "pattern", "partitions"),
    [
        pytest.param({"subscribe": "a"}, "subscribe", ("a",), None, (), id="one topic"),
        pytest.param(
            {"subscribe": " b, a ,b,"}, "subscribe", ("b", "a"), None, (), id="topics trimmed"
        ),
        pytest.param(
            {"subscribePattern": "events-.*"}, "subscribePattern", (), "events-.*", (), id="re"
        ),
        pytest.param(
            {"assign": '{"b": [1], "a": [2, 0, 2]}'},
            "assign",
            (),
            None,
            (TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 1)),
            id="assign sorted, deduplicated",
        ),
    ],
)
def test_strategy(
    raw: dict[str, str],
    kind: str,
    topics: tuple[str, ...],
    pattern: str | None,
    partitions: tuple[TopicPartition, ...],
) -> None:
    strategy = parse({**BOOTSTRAP, **raw}).strategy
    assert (strategy.kind, strategy.topics, strategy.pattern, strategy.partitions) == (
        kind,
        topics,
        pattern,
        partitions,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param({"subscribe": "b,a"}, "subscribe=b,a", id="subscribe"),
        pytest.param({"subscribePattern": "e.*"}, "subscribePattern=e.*", id="pattern"),
        pytest.param({"assign": '{"t": [1, 0]}'}, "assign=t-0,t-1", id="assign"),
    ],
)
def test_strategy_describe(raw: dict[str, str], expected: str) -> None:
    assert parse({**BOOTSTRAP, **raw}).strategy.describe() == expected


STAMP = "1700000000000"
BY_STAMP = '{"t": {"0": 1600000000000}}'
OFFSETS = '{"t": {"0": 42, "1": -2}}'


@pytest.mark.parametrize(
    ("raw", "streaming", "kind", "option"),
    [
        pytest.param(
            {"startingTimestamp": STAMP, "startingOffsetsByTimestamp": BY_STAMP,
             "startingOffsets": OFFSETS},
            True, "timestamp", "startingTimestamp", id="Spark: startingTimestamp wins",
        ),
        pytest.param(
            {"startingOffsetsByTimestamp": BY_STAMP, "startingOffsets": OFFSETS},
            True, "by_timestamp", "startingOffsetsByTimestamp",
            id="Spark: startingOffsetsByTimestamp beats startingOffsets",
        ),
        pytest.param(
            {"startingOffsets": OFFSETS}, True, "specific", "startingOffsets", id="offsets alone"
        ),
        pytest.param(
            {"endingTimestamp": STAMP, "endingOffsetsByTimestamp": BY_STAMP,
             "endingOffsets": '{"t": {"0": 42}}'},
            False, "timestamp", "endingTimestamp", id="Spark: endingTimestamp wins",
        ),
        pytest.param(
            {"endingOffsetsByTimestamp": BY_STAMP, "endingOffsets": '{"t": {"0": 42}}'},
            False, "by_timestamp", "endingOffsetsByTimestamp",
            id="Spark: endingOffsetsByTimestamp beats endingOffsets",
        ),
        pytest.param(
            {"endingOffsets": '{"t": {"0": 42, "1": -1}}'}, False, "specific", "endingOffsets",
            id="ending offsets alone",
        ),
    ],
)  # fmt: skip
def test_offset_option_precedence(
    raw: dict[str, str], streaming: bool, kind: str, option: str
) -> None:
    opts = parse({**SUB, **raw}, streaming)
    spec = opts.starting if option.startswith("starting") else opts.ending
    assert spec is not None
    assert (spec.kind, spec.option) == (kind, option)


@pytest.mark.parametrize(
    ("raw", "streaming", "starting", "ending"),
    [
        pytest.param(
            {"startingOffsets": '{"t": {"0": 42, "1": -2, "2": -1}}'},
            True,
            ("specific", {T0: 42, T1: -2, TopicPartition("t", 2): -1}, None),
            None,
            id="stream: JSON with -1 and -2",
        ),
        pytest.param(
            {"startingOffsets": '{"t": {"0": 42, "1": -2}}', "endingOffsets": '{"t": {"0": 50}}'},
            False,
            ("specific", {T0: 42, T1: -2}, None),
            ("specific", {T0: 50}, None),
            id="batch: JSON both ends",
        ),
        pytest.param(
            {"startingTimestamp": "0", "endingTimestamp": STAMP},
            False,
            ("timestamp", {}, 0),
            ("timestamp", {}, 1_700_000_000_000),
            id="batch: timestamps, 0 allowed",
        ),
        pytest.param(
            {"startingOffsetsByTimestamp": BY_STAMP, "endingOffsetsByTimestamp": BY_STAMP},
            False,
            ("by_timestamp", {T0: 1_600_000_000_000}, None),
            ("by_timestamp", {T0: 1_600_000_000_000}, None),
            id="batch: per-partition timestamps",
        ),
        pytest.param(
            {"startingOffsets": "latest", "endingOffsets": "latest"},
            None,
            ("latest", {}, None),
            ("latest", {}, None),
            id="unknown mode: latest start and an ending option",
        ),
        pytest.param(
            {"startingOffsets": '{"t": {"0": -1}}', "endingOffsets": '{"t": {"0": 9}}'},
            None,
            ("specific", {T0: -1}, None),
            ("specific", {T0: 9}, None),
            id="unknown mode: JSON -1 start and JSON end",
        ),
        pytest.param(
            {"endingTimestamp": STAMP},
            None,
            ("earliest", {}, None),
            ("timestamp", {}, 1_700_000_000_000),
            id="unknown mode: endingTimestamp",
        ),
        pytest.param(
            {"endingOffsets": "LATEST"},
            False,
            ("earliest", {}, None),
            ("latest", {}, None),
            id="batch: endingOffsets=LATEST",
        ),
    ],
)
def test_offset_specs(
    raw: dict[str, str],
    streaming: bool | None,
    starting: tuple[object, ...],
    ending: tuple[object, ...] | None,
) -> None:
    opts = parse({**SUB, **raw}, streaming)
    assert (opts.starting.kind, opts.starting.offsets, opts.starting.timestamp) == starting
    got_ending = opts.ending and (opts.ending.kind, opts.ending.offsets, opts.ending.timestamp)
    assert got_ending == ending


@pytest.mark.parametrize(
    ("raw", "warned"),
    [
        pytest.param({"endingTimestamp": STAMP}, True, id="Spark: ignored, here with a warning"),
        pytest.param(
            {"endingTimestamp": STAMP, "startingTimestamp": "5"}, True, id="beside a start"
        ),
        pytest.param({}, False, id="not set"),
    ],
)
def test_ending_timestamp_is_ignored_by_a_stream_as_in_spark(
    raw: dict[str, str], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark's validateStreamOptions refuses endingOffsets and endingOffsetsByTimestamp only
    (both in the refusal table above): a stream never reads endingTimestamp."""
    with caplog.at_level(logging.WARNING, logger="kafka_direct.config.bounds"):
        opts = parse({**SUB, **raw}, streaming=True)
    assert opts.ending is None
    said = [r.getMessage() for r in caplog.records if "endingTimestamp" in r.getMessage()]
    assert bool(said) == warned
    if warned:
        assert "ignored in a streaming query" in said[0]
        assert "as Spark's Kafka source ignores it" in said[0]


def test_offsets_within_assign_are_accepted() -> None:
    opts = parse(
        {**BOOTSTRAP, "assign": '{"t": [0, 1]}', "startingOffsets": '{"t": {"1": 5}}'}, True
    )
    assert opts.starting.offsets == {T1: 5}


def test_kafka_params_pass_through_without_prefix() -> None:
    opts = parse(
        {
            **SUB,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.group.id": "my-group",
            "kafka.isolation.level": "read_committed",
            "kafka.fetch.min.bytes": "1024",
            "kafka.sasl.password": " padded secret ",
            "maxOffsetsPerTrigger": "10",
        }
    )
    assert opts.kafka == {
        "bootstrap.servers": "broker1:9092,broker2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "group.id": "my-group",
        "isolation.level": "read_committed",
        "fetch.min.bytes": "1024",
        "sasl.password": " padded secret ",  # verbatim: a secret may start or end with a space
    }
    assert opts.bootstrap_servers == "broker1:9092,broker2:9092"
    assert opts.commits.group == "my-group"
    assert opts.isolation_level == "read_committed"


def test_none_values_are_treated_as_unset() -> None:
    opts = parse({**SUB, "startingOffsets": None, "maxOffsetsPerTrigger": None})  # type: ignore[dict-item]
    assert (opts.starting.kind, opts.rates.max_offsets) == ("latest", None)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        pytest.param("15m", 900_000, id="15m"),
        pytest.param("30s", 30_000, id="30s"),
        pytest.param("500ms", 500, id="500ms"),
        pytest.param("2h", 7_200_000, id="2h"),
        pytest.param("1d", 86_400_000, id="1d"),
        pytest.param("3min", 180_000, id="3min"),
        pytest.param("1000", 1000, id="bare number is ms"),
        pytest.param("0", 0, id="zero"),
        pytest.param(" 5 S ", 5000, id="spaces and upper case"),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    assert parse({**SUB, "maxTriggerDelay": text}).rates.max_trigger_delay_ms == ms


@pytest.mark.parametrize(
    "text", ["", "ms", "-1s", "1.5s", "5 parsecs", "1y", "s5"], ids=lambda t: repr(t)
)
def test_invalid_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("name", "value", "attribute", "expected"),
    [
        pytest.param("minOffsetsPerTrigger", "5", "rates.min_offsets", 5, id="min"),
        pytest.param("maxOffsetsPerTrigger", "5", "rates.max_offsets", 5, id="max"),
        pytest.param(
            "maxOffsetsPerPartitionPerTrigger", "1", "rates.max_offsets_per_partition", 1,
            id="per partition",
        ),
        pytest.param("minPartitions", "12", "splits.min_partitions", 12, id="minPartitions"),
        pytest.param(
            "maxRecordsPerPartition", "9", "splits.max_records_per_partition", 9, id="maxRecs"
        ),
        pytest.param("fetchOffset.numRetries", "1", "fetch_offset.num_retries", 1, id="no retry"),
        pytest.param("consumerCache.enabled", "false", "consumer_cache.enabled", False, id="cache"),
        pytest.param("fastPath.enabled", "false", "reads.fast_path", False, id="fast path off"),
        pytest.param("groupIdPrefix", "mine", "group_id_prefix", "mine", id="prefix"),
    ],
)  # fmt: skip
def test_accepted_values(name: str, value: str, attribute: str, expected: object) -> None:
    got: Any = parse({**SUB, name: value})
    for part in attribute.split("."):
        got = getattr(got, part)
    assert got == expected


def test_min_equal_to_max_offsets_per_trigger_is_accepted() -> None:
    opts = parse({**SUB, "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "5"})
    assert (opts.rates.min_offsets, opts.rates.max_offsets) == (5, 5)


def test_unknown_options_that_are_no_near_miss_are_ignored_like_spark() -> None:
    opts = parse({**SUB, "path": "ignored", "checkpointLocation": "/tmp/x"})
    assert opts.strategy.topics == ("t",)


def test_source_options_are_frozen() -> None:
    opts = parse(SUB)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.fail_on_data_loss = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.rates.max_offsets = 1  # type: ignore[misc]


def test_source_options_survive_pickling() -> None:
    # Readers are pickled to executors; the options and their KafkaConfig go with them.
    opts = parse({**SUB, "kafka.sasl.password": "pw"})
    copy = pickle.loads(pickle.dumps(opts))
    assert copy == opts
    assert copy.kafka.to_dict() == {"bootstrap.servers": SUB["kafka.bootstrap.servers"],
                                    "sasl.password": "pw"}  # fmt: skip


# --- secrets --------------------------------------------------------------------------------------

SECRETS = {
    "kafka.sasl.password": "SASL-PW-s3cr3t",
    "kafka.ssl.key.password": "SSL-KEY-PW-s3cr3t",
    # (a keystore password alone is refused, as Java refuses it: test_security.py covers its
    # redaction with a keystore)
    "kafka.sasl.oauthbearer.client.secret": "OAUTH-CLIENT-s3cr3t",
    # sasl.jaas.config is refused (a JVM setting): librdkafka's unsecured-JWT config stands in.
    "kafka.sasl.oauthbearer.config": "principal=alice scope=x extension_pw=JAAS-PW-s3cr3t",
    "kafka.sasl.oauthbearer.assertion.private.key.passphrase": "PASSPHRASE-s3cr3t",
    "kafka.ssl.key.pem": "-----BEGIN PRIVATE KEY-----PEM-s3cr3t-----END PRIVATE KEY-----",
    "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/t?token=TOKEN-s3cr3t",
}
MARKERS = [
    "SASL-PW-s3cr3t",
    "SSL-KEY-PW-s3cr3t",
    "OAUTH-CLIENT-s3cr3t",
    "JAAS-PW-s3cr3t",
    "PASSPHRASE-s3cr3t",
    "PEM-s3cr3t",
    "TOKEN-s3cr3t",
]
SECURED = {
    **SUB,
    **SECRETS,
    "kafka.security.protocol": "SASL_SSL",
    # As Java, SASL with no mechanism means GSSAPI, which these wheels lack.
    "kafka.sasl.mechanism": "PLAIN",
    "kafka.sasl.username": "alice",
}


def assert_no_secret(text: str) -> None:
    leaked = [marker for marker in MARKERS if marker in text]
    assert not leaked, f"secrets leaked: {leaked}"


def test_every_secret_has_a_marker() -> None:
    # Guards the guard: each secret value above must be searched for by assert_no_secret.
    assert all(any(m in v for m in MARKERS) for v in SECRETS.values())
    assert all(any(m in v for v in SECRETS.values()) for m in MARKERS)


@pytest.mark.parametrize(
    "render",
    [
        pytest.param(repr, id="repr(SourceOptions)"),
        pytest.param(str, id="str(SourceOptions)"),
        pytest.param(lambda o: f"{o}", id="f-string SourceOptions"),
        pytest.param(lambda o: repr(o.kafka), id="repr(KafkaConfig)"),
        pytest.param(lambda o: str(o.kafka), id="str(KafkaConfig)"),
        pytest.param(lambda o: repr(redact(o.kafka)), id="redact(KafkaConfig)"),
    ],
)
def test_secrets_never_print(render: Any) -> None:
    text = render(parse(SECURED))
    assert_no_secret(text)
    assert REDACTED in text
    assert "alice" in text  # not a secret: the user name is shown, so redaction is selective


@pytest.mark.parametrize(("raw", "streaming", "option", "shown", "hint"), INVALID_CASES)
def test_secrets_never_appear_in_refusals(
    raw: dict[str, str], streaming: bool | None, option: str, shown: str, hint: str
) -> None:
    err = refusal({**SECRETS, **raw}, streaming)
    assert err.option == option
    assert_no_secret(str(err))
    assert_no_secret(repr(err))
    assert_no_secret(repr(err.args))
    assert_no_secret(repr(err.value))


@pytest.mark.parametrize("key", sorted(SOURCE_OWNED_KAFKA_KEYS))
def test_secrets_never_appear_in_owned_key_refusals(key: str) -> None:
    err = refusal({**SECURED, f"kafka.{key}": "x"}, True, UnsupportedKafkaOptionError)
    assert_no_secret(str(err))
    assert_no_secret(repr(err.args))


def test_secret_like_owned_key_value_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    # No owned key is secret-looking today; should one become owned, its value stays hidden.
    monkeypatch.setitem(SOURCE_OWNED_KAFKA_KEYS, "sasl.password", "Remove it.")
    err = refusal({**SECURED}, True, UnsupportedKafkaOptionError)
    assert err.option == "kafka.sasl.password"
    assert err.value == REDACTED
    assert_no_secret(str(err))


def test_secrets_still_reach_the_client() -> None:
    opts = parse(SECURED)
    expected = {key.removeprefix("kafka."): value for key, value in SECRETS.items()}
    raw = opts.kafka.to_dict()
    executor = executor_consumer_config(opts.kafka, group_id="g", isolation_level="read_committed")
    admin = admin_config(opts.kafka)
    for name, value in expected.items():
        assert opts.kafka[name] == value
        assert raw[name] == value
        assert executor[name] == value
        assert admin[name] == value


@pytest.mark.parametrize(
    ("key", "redacted"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("ssl.keystore.password", True),
        ("ssl.truststore.password", True),
        ("sasl.oauthbearer.client.secret", True),
        ("sasl.jaas.config", True),
        ("ssl.key.pem", True),
        ("sasl.oauthbearer.assertion.private.key.passphrase", True),
        ("SASL.PASSWORD", True),
        ("some.token", True),
        ("my.credentials", True),
        ("bootstrap.servers", False),
        ("security.protocol", False),
        ("sasl.mechanism", False),
        ("sasl.username", False),
        ("ssl.ca.location", False),
        ("group.id", False),
    ],
)
def test_redact(key: str, redacted: bool) -> None:
    original = {key: "value", "client.id": "c"}
    out = redact(original)
    assert out == {key: REDACTED if redacted else "value", "client.id": "c"}
    assert original == {key: "value", "client.id": "c"}  # a copy, never in place


def test_kafka_config_is_an_immutable_mapping() -> None:
    source = {"bootstrap.servers": "b:9092", "sasl.password": "pw"}
    config = KafkaConfig(source)
    source["bootstrap.servers"] = "changed"
    assert config["bootstrap.servers"] == "b:9092"
    assert len(config) == 2
    assert config == {"bootstrap.servers": "b:9092", "sasl.password": "pw"}
    assert hash(config) == hash(KafkaConfig({"sasl.password": "pw", "bootstrap.servers": "b:9092"}))
    merged = config.merged({"sasl.password": "new"})
    assert (config["sasl.password"], merged["sasl.password"]) == ("pw", "new")
    assert not hasattr(config, "__dict__")
    with pytest.raises(TypeError):
        config["x"] = "y"  # type: ignore[index]


# --- executor and admin configs -------------------------------------------------------------------

USER_CONSUMER = {
    "bootstrap.servers": "b:9092",
    "security.protocol": "SSL",
    "group.id": "user-group",
    "enable.auto.commit": "true",
    "enable.auto.offset.store": "true",
    "auto.offset.reset": "earliest",
    "enable.partition.eof": "false",
    "isolation.level": "read_uncommitted",
}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("group.id", "exec-group", id="group.id: never the user's group"),
        pytest.param("enable.auto.commit", "false", id="enable.auto.commit: checkpoint owns"),
        pytest.param("enable.auto.offset.store", "false", id="enable.auto.offset.store"),
        pytest.param("auto.offset.reset", "error", id="auto.offset.reset: surface data loss"),
        pytest.param("enable.partition.eof", "true", id="enable.partition.eof: detect log end"),
        pytest.param("isolation.level", "read_committed", id="isolation.level: the driver's"),
        pytest.param("security.protocol", "SSL", id="user's other keys kept"),
        pytest.param("bootstrap.servers", "b:9092", id="bootstrap kept"),
    ],
)
def test_executor_config_forced_keys_override_the_user(key: str, expected: str) -> None:
    config = executor_consumer_config(
        USER_CONSUMER, group_id="exec-group", isolation_level="read_committed"
    )
    assert config[key] == expected


def test_executor_config_does_not_mutate_the_user_config() -> None:
    user = dict(USER_CONSUMER)
    executor_consumer_config(user, group_id="exec-group", isolation_level="read_committed")
    assert user == USER_CONSUMER


TUNABLES = [
    ("fetch.queue.backoff.ms", "10"),
    ("max.partition.fetch.bytes", "4194304"),
    ("fetch.max.bytes", "16777216"),
    ("queued.max.messages.kbytes", "16384"),
    ("queued.min.messages", "16"),
    ("fetch.wait.max.ms", "500"),
    ("client.id", "kafka-direct-executor"),
]


@pytest.mark.parametrize(("key", "default"), TUNABLES, ids=[k for k, _ in TUNABLES])
def test_executor_tunable_applies_only_when_unset(key: str, default: str) -> None:
    unset = executor_consumer_config({}, group_id="g", isolation_level="read_uncommitted")
    chosen = executor_consumer_config(
        {key: "12345"}, group_id="g", isolation_level="read_uncommitted"
    )
    assert (unset[key], chosen[key]) == (default, "12345")


def test_regression_user_fetch_message_max_bytes_not_overridden_by_its_alias() -> None:
    # librdkafka: max.partition.fetch.bytes is an alias of fetch.message.max.bytes, and the key
    # set last wins. Adding the tunable after the user's fetch.message.max.bytes replaced it.
    config = executor_consumer_config(
        {"fetch.message.max.bytes": "1000"}, group_id="g", isolation_level="read_uncommitted"
    )
    assert config["fetch.message.max.bytes"] == "1000"
    assert "max.partition.fetch.bytes" not in config


@pytest.mark.parametrize(
    ("raw", "isolation"),
    [
        pytest.param(SUB, "read_uncommitted", id="default is explicit, librdkafka's is not"),
        pytest.param(
            {**SUB, "kafka.isolation.level": "read_committed"}, "read_committed", id="committed"
        ),
    ],
)
def test_executor_isolation_equals_the_drivers(raw: dict[str, str], isolation: str) -> None:
    opts = parse(raw)
    config = executor_consumer_config(
        opts.kafka, group_id="g", isolation_level=opts.isolation_level
    )
    assert opts.isolation_level == isolation
    assert config["isolation.level"] == isolation


@pytest.mark.parametrize(
    "user_group",
    [
        pytest.param(None, id="no user group"),
        pytest.param("", id="empty user group"),
        pytest.param("orders-app", id="user group"),
        pytest.param("spark-kafka-source", id="user group equal to the prefix"),
        pytest.param("orders-app-executor", id="user group that looks derived"),
    ],
)
def test_executor_group_id_never_the_users_and_deterministic(user_group: str | None) -> None:
    args = (user_group, "spark-kafka-source", "b:9092", "subscribe=t")
    group = executor_group_id(*args)
    assert group != user_group
    assert group == executor_group_id(*args)
    assert group.endswith("-executor")


def test_executor_group_id_from_the_query_definition() -> None:
    base = executor_group_id(None, "pfx", "b:9092", "subscribe=t")
    assert base.startswith("pfx-")
    assert base != executor_group_id(None, "pfx", "b:9092", "subscribe=u")
    assert base != executor_group_id(None, "pfx", "c:9092", "subscribe=t")
    assert executor_group_id("g", "pfx", "b:9092", "subscribe=t") == executor_group_id(
        "g", "other", "c:9092", "assign=t-0"
    )


CONSUMER_ONLY = [
    "group.id",
    "isolation.level",
    "group.instance.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "max.partition.fetch.bytes",
    "fetch.message.max.bytes",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "check.crcs",
    "client.rack",
]


@pytest.mark.parametrize("key", CONSUMER_ONLY)
def test_admin_config_drops_consumer_only_keys(key: str) -> None:
    user = {"bootstrap.servers": "b:9092", "security.protocol": "SSL", key: "1"}
    assert admin_config(user) == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SSL",
        "client.id": "kafka-direct-driver",
        "reconnect.backoff.ms": "20",
    }


def test_admin_config_keeps_the_users_client_id() -> None:
    assert admin_config({"bootstrap.servers": "b", "client.id": "mine"})["client.id"] == "mine"


def test_arrow_batch_size_above_librdkafkas_consume_limit_is_refused() -> None:
    # Regression (review): 2,000,000 was accepted and every task then failed inside consume().
    with pytest.raises(ConfigurationError, match=r"arrowBatchSize.*from 1 to 1000000"):
        parse_source_options(
            {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "arrowBatchSize": "2000000"},
            streaming=True,
        )


MB = 1024 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(None, 16 * MB, id="default 16m"),
        pytest.param("64m", 64 * MB, id="64m"),
        pytest.param("512k", 512 * 1024, id="512k"),
        pytest.param("1g", 1024 * MB, id="1g"),
        pytest.param("1048576", MB, id="bare bytes"),
        pytest.param(" 32 MB ", 32 * MB, id="spaces and MB"),
    ],
)
def test_max_batch_bytes(text: str | None, expected: int) -> None:
    raw = dict(SUB) if text is None else {**SUB, "maxBatchBytes": text}
    opts = parse(raw)
    assert opts.reads.max_batch_bytes == expected
    assert opts.executor_settings().max_batch_bytes == expected


@pytest.mark.parametrize("text", ["1k", "2g", "lots", "-1", "16 megabytes", ""])
def test_max_batch_bytes_refusals_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse({**SUB, "maxBatchBytes": text})
    message = str(info.value)
    assert "maxBatchBytes" in message and "from 64k to 1024m" in message


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param({"taskMemoryBudget": "192m"}, 16 * MB, id="192m budget: 16m batches"),
        pytest.param({"taskMemoryBudget": "48m"}, 4 * MB, id="48m budget: 4m batches"),
        pytest.param({"taskMemoryBudget": "1g", "maxBatchBytes": "8m"}, 8 * MB, id="both"),
        pytest.param(
            {"taskMemoryBudget": "120m", "maxBatchBytes": "10m"}, 10 * MB, id="both, at the edge"
        ),
        pytest.param({"TASKMEMORYBUDGET": "768k"}, 64 * 1024, id="any case, the smallest"),
    ],
)
def test_task_memory_budget_sizes_the_batches(given: dict[str, str], expected: int) -> None:
    opts = parse({**SUB, **given})
    assert opts.reads.max_batch_bytes == expected
    assert opts.executor_settings().max_batch_bytes == expected


@pytest.mark.parametrize(
    ("given", "names"),
    [
        pytest.param({"taskMemoryBudget": "100k"}, ("taskMemoryBudget", "from 768k"), id="small"),
        pytest.param({"taskMemoryBudget": "lots"}, ("taskMemoryBudget", "'lots'"), id="not a size"),
        pytest.param(
            {"taskMemoryBudget": "100m", "maxBatchBytes": "16m"},
            ("maxBatchBytes", "'16m'", "taskMemoryBudget (100m)", "set only taskMemoryBudget"),
            id="batches too big for the budget",
        ),
    ],
)
def test_task_memory_budget_refusals_name_the_option_and_the_fix(
    given: dict[str, str], names: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse({**SUB, **given})
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("user", "budget", "expected"),
    [
        pytest.param({}, 16 * MB, (4 * MB, 16 * MB, 16384), id="default budget"),
        pytest.param({}, MB, (MB, MB, 1024), id="1 MB budget: one fetch, one queue of 1 MB"),
        pytest.param({}, 256 * MB, (4 * MB, 52_428_800, 262144), id="a fetch stays at 50 MB"),
        pytest.param(
            {"max.partition.fetch.bytes": str(64 * MB)},
            16 * MB,
            (64 * MB, 64 * MB, 16384),
            id="a fetch holds the user's partition fetch",
        ),
        pytest.param(
            {"fetch.message.max.bytes": str(32 * MB)},
            16 * MB,
            (None, 32 * MB, 16384),
            id="the alias counts as the user's",
        ),
    ],
)
def test_executor_prefetch_follows_the_batch_budget(
    user: dict[str, str], budget: int, expected: tuple[int | None, int, int]
) -> None:
    config = executor_consumer_config(
        user, group_id="g", isolation_level="read_uncommitted", max_batch_bytes=budget
    )
    partition, fetch, kbytes = expected
    got_partition = config.get("max.partition.fetch.bytes")
    assert (int(got_partition) if got_partition else None) == partition
    assert int(config["fetch.max.bytes"]) == fetch
    assert int(config["queued.max.messages.kbytes"]) == kbytes


def test_a_stream_with_kafka_group_id_alone_says_it_does_not_commit_to_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Earlier versions committed to kafka.group.id; a job that relied on it must be told.
    raw = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "kafka.group.id": "billing"}
    with caplog.at_level("WARNING", logger="kafka_direct.config.source"):
        opts = parse_source_options(raw, streaming=True)
    assert opts.commits.target is None
    assert "does not commit its offsets to kafka.group.id 'billing'" in caplog.text
    assert "commitOffsetsToGroup" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="kafka_direct.config.source"):
        parse_source_options({**raw, "commitOffsetsToGroup": "billing"}, streaming=True)
        parse_source_options(raw, streaming=False)
    assert "does not commit" not in caplog.text
