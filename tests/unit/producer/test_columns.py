"""The sink's columns, matched as Spark's Kafka sink matches them (KafkaWriter.validateQuery):
every refused column has a test of its message, naming the column, its type and the types
allowed. Pure: no Spark, no broker; types in Spark's simpleString form."""

from __future__ import annotations

import pickle

import pytest

from kafka_direct.errors import ConfigurationError
from kafka_direct.producer.columns import (
    HEADERS_TYPE,
    SinkColumnError,
    SinkColumns,
    ignored_columns_warning,
    plan_columns,
)


def test_value_only_with_the_topic_option() -> None:
    cols = plan_columns([("value", "binary")], "out")
    assert cols == SinkColumns(names=("value",), value=0, value_is_string=False, topic="out")
    assert cols.simple


def test_every_column_is_found_by_position() -> None:
    fields = [
        ("id", "bigint"),
        ("topic", "string"),
        ("key", "string"),
        ("partition", "int"),
        ("headers", HEADERS_TYPE),
        ("value", "string"),
    ]
    cols = plan_columns(fields, None)
    assert (cols.value, cols.key, cols.partition, cols.headers, cols.topic_column) == (
        5,
        2,
        3,
        4,
        1,
    )
    assert cols.value_is_string and cols.key_is_string
    assert cols.ignored == ("id",)
    assert not cols.simple


def test_names_match_exactly_as_in_spark_and_a_name_in_other_case_is_ignored_with_a_guess() -> None:
    # Spark's KafkaWriter compares names with ==: 'Key' is not the key, and 'Partition' of
    # any type is not checked, whatever spark.sql.caseSensitive says.
    cols = plan_columns(
        [("value", "binary"), ("Key", "binary"), ("Partition", "bigint"), ("KEY", "int")], "t"
    )
    assert (cols.value, cols.key, cols.partition) == (0, None, None)
    assert cols.ignored == ("Key", "Partition", "KEY")
    warning = ignored_columns_warning(cols)
    assert warning is not None and "'Key' -> did you mean 'key'?" in warning


def test_a_second_column_of_a_role_is_ignored_and_the_first_is_written_as_spark_does() -> None:
    cols = plan_columns([("value", "string"), ("key", "string"), ("value", "binary")], "t")
    assert (cols.value, cols.value_is_string, cols.key) == (0, True, 1)
    assert cols.ignored == ("value",)


def test_a_value_column_in_other_case_is_missing_and_the_error_guesses_it() -> None:
    with pytest.raises(SinkColumnError, match="Did you mean 'value' \\(the column 'VALUE'"):
        plan_columns([("VALUE", "binary")], "t")


def test_the_topic_option_wins_over_the_column_and_its_type_is_not_checked() -> None:
    cols = plan_columns([("value", "binary"), ("topic", "int")], "out")
    assert cols.topic_column is None and cols.topic == "out" and cols.topic_column_overridden
    assert cols.simple


def test_headers_type_may_be_written_with_spaces() -> None:
    cols = plan_columns(
        [("value", "binary"), ("headers", "array<struct<key: string, value: binary>>")], "t"
    )
    assert cols.headers == 1


# column, fields, topic option, phrases the message must contain
REFUSED = [
    (
        "value",
        [("key", "string")],
        "t",
        ["needs a 'value' column (string or binary)", "'key'", "alias('value')"],
    ),
    (
        "value",
        [("value", "int")],
        "t",
        ["Column 'value' has type int", "string or binary", "cast('string')"],
    ),
    ("value", [("value", "struct<a:int>")], "t", ["type struct<a:int>", "to_json"]),
    (
        "key",
        [("value", "string"), ("key", "bigint")],
        "t",
        ["Column 'key' has type bigint", "string or binary"],
    ),
    (
        "headers",
        [("value", "string"), ("headers", "map<string,binary>")],
        "t",
        ["Column 'headers' has type map<string,binary>", HEADERS_TYPE],
    ),
    (
        "headers",
        [("value", "string"), ("headers", "array<struct<key:string,value:string>>")],
        "t",
        ["array<struct<key:string,value:string>>", "cast('binary')"],
    ),
    (
        "topic",
        [("value", "string"), ("topic", "binary")],
        None,
        ["Column 'topic' has type binary", "from string", "'topic' option"],
    ),
    (
        "partition",
        [("value", "string"), ("partition", "bigint")],
        "t",
        ["Column 'partition' has type bigint", "from int", "cast('int')"],
    ),
]


@pytest.mark.parametrize(("column", "fields", "topic", "phrases"), REFUSED)
def test_a_column_the_sink_cannot_write_is_refused_by_name_type_and_allowed_types(
    column: str, fields: list[tuple[str, str]], topic: str | None, phrases: list[str]
) -> None:
    with pytest.raises(SinkColumnError) as info:
        plan_columns(fields, topic)
    assert isinstance(info.value, ConfigurationError)
    assert info.value.option == column
    for phrase in phrases:
        assert phrase in str(info.value)


def test_no_topic_option_and_no_topic_column_names_the_option() -> None:
    # Spark: "topic option required when no 'topic' attribute is present."
    with pytest.raises(ConfigurationError) as info:
        plan_columns([("value", "string")], None)
    assert info.value.option == "topic"
    assert "Set .option('topic', 'name'), or add a string column 'topic'" in str(info.value)


def test_other_columns_get_one_warning_that_names_them() -> None:
    cols = plan_columns([("vaule", "string"), ("value", "string"), ("ts", "timestamp")], "t")
    warning = ignored_columns_warning(cols)
    assert warning is not None
    assert "'vaule', 'ts'" in warning and "misspelt" in warning
    assert ignored_columns_warning(plan_columns([("value", "string")], "t")) is None


def test_columns_pickle() -> None:
    cols = plan_columns([("value", "string"), ("key", "binary"), ("topic", "string")], None)
    assert pickle.loads(pickle.dumps(cols)) == cols


@pytest.mark.parametrize("typo", ["vaule", "valeu", "Vlaue", "values"])
def test_a_misspelt_value_column_gets_did_you_mean(typo: str) -> None:
    # Issue: a column typo got no "did you mean 'value'?", while option typos did.
    with pytest.raises(SinkColumnError) as info:
        plan_columns([(typo, "string"), ("key", "string")], "t")
    assert f"Did you mean 'value' (the column '{typo}' is ignored)?" in str(info.value)


def test_a_missing_value_with_no_lookalike_gets_no_guess() -> None:
    with pytest.raises(SinkColumnError) as info:
        plan_columns([("word", "string"), ("count", "bigint")], "t")
    assert "Did you mean" not in str(info.value)
    assert "'word', 'count'" in str(info.value)


def test_a_misspelt_topic_column_gets_did_you_mean() -> None:
    with pytest.raises(ConfigurationError) as info:
        plan_columns([("value", "string"), ("topci", "string")], None)
    assert "Did you mean 'topic' (the column 'topci' is ignored)?" in str(info.value)


def test_the_ignored_columns_warning_guesses_each_typo() -> None:
    cols = plan_columns([("value", "string"), ("kye", "string"), ("ts", "timestamp")], "t")
    warning = ignored_columns_warning(cols)
    assert warning is not None
    assert warning.endswith("'kye' -> did you mean 'key'?")
    assert "'ts' ->" not in warning
