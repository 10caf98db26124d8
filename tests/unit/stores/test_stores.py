"""Offset stores without servers: the batch judgement, the SQL dialects, secrets, and the SQLite
store (an in-process file). PostgreSQL, MariaDB and Kafka are in tests/integration/test_stores*.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from kafka_direct.errors import ConfigurationError, OffsetConflictError
from kafka_direct.offsets import OffsetRange, PartitionOffsets, TopicPartition
from kafka_direct.stores import (
    KafkaGroupStore,
    SqlOffsetStore,
    already_applied,
    exactly_once_foreach_batch,
    starting_offsets_json,
)
from kafka_direct.stores.base import OffsetStore, ends_of
from kafka_direct.stores.exactly_once import judge_batch
from kafka_direct.stores.sql_dialects import DIALECTS, dialect_named, is_conflict_error

TP0, TP1, TP2 = (TopicPartition("t", p) for p in range(3))


class DictStore(OffsetStore):
    def __init__(self, offsets: PartitionOffsets | None = None) -> None:
        self.offsets = dict(offsets or {})

    def load(self, group: str, tps: Iterable[TopicPartition] | None = None) -> PartitionOffsets:
        wanted = set(self.offsets if tps is None else tps)
        return {tp: o for tp, o in self.offsets.items() if tp in wanted}

    def save(self, group: str, ranges: Sequence[OffsetRange]) -> None:
        self.offsets.update(ends_of(ranges))


# -- judging a foreachBatch batch against the store ---------------------------------------------


def test_plan_batch_applies_skips_and_trims() -> None:
    plan = judge_batch(
        {TP0: (10, 19), TP1: (0, 4), TP2: (5, 9), TopicPartition("u", 0): (7, 7)},
        {TP0: 10, TP1: 5, TP2: 7, TopicPartition("u", 0): 3},
    )
    actions = {p.tp: p.action for p in plan.partitions}
    assert actions == {
        TP0: "apply",  # stored == first offset: the next batch
        TP1: "skip",  # stored past the last offset: a replay
        TP2: "partial",  # stored inside the batch: only 7..9 are new
        TopicPartition("u", 0): "apply",  # stored below the first: a gap (transaction marker)
    }
    assert [p.tp for p in plan.claims] == [TP0, TP2, TopicPartition("u", 0)]
    assert [p.tp for p in plan.replayed] == [TP1, TP2]
    assert {p.tp: p.next_offset for p in plan.claims}[TP0] == 20


def test_plan_batch_treats_never_stored_partitions_as_new() -> None:
    plan = judge_batch({TP0: (3, 8)}, {})
    assert plan.partitions[0].action == "apply"
    assert plan.partitions[0].stored is None
    assert plan.replayed == []


# -- dialects ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t; DROP TABLE x", "1abc", "a.b.c", "x-y", "", 'a"b'])
def test_table_names_that_could_carry_sql_are_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="table"):
        DIALECTS["postgres"].table(name)


def test_dialects_quote_the_reserved_partition_column() -> None:
    assert '"partition"' in DIALECTS["sqlite"].create_table("kafka_offsets")
    assert "`partition`" in DIALECTS["mysql"].create_table("kafka_offsets")
    assert '"ops"."offsets"' in DIALECTS["postgres"].insert("ops.offsets")
    assert "ON DUPLICATE KEY UPDATE" in DIALECTS["mysql"].upsert("o")
    assert "ON CONFLICT" in DIALECTS["sqlite"].upsert("o")
    assert DIALECTS["postgres"].conditional_update("o").count("%s") == 5
    assert DIALECTS["sqlite"].conditional_update("o").count("?") == 5
    # MySQL's default collation is case-insensitive; Kafka names are not.
    assert "utf8mb4_bin" in DIALECTS["mysql"].create_table("o")


def test_unknown_dialect_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="'sqlite', 'postgres', 'mysql'"):
        dialect_named("oracle")


def test_conflict_errors_are_recognised_without_importing_drivers() -> None:
    IntegrityError = type("IntegrityError", (Exception,), {})
    UniqueViolation = type("UniqueViolation", (IntegrityError,), {})
    OperationalError = type("OperationalError", (Exception,), {})
    deadlock_pg = OperationalError("deadlock")
    deadlock_pg.sqlstate = "40P01"
    assert is_conflict_error(UniqueViolation("duplicate key"))
    assert is_conflict_error(deadlock_pg)
    assert is_conflict_error(OperationalError(1213, "Deadlock found"))
    assert not is_conflict_error(OperationalError(2003, "Can't connect"))
    assert not is_conflict_error(ValueError("x"))


# -- secrets and constructors -------------------------------------------------------------------


def test_postgres_store_is_lazy_and_hides_the_password() -> None:
    store = SqlOffsetStore.postgres("postgresql://app:hunter2@db.example:6543/prod")
    assert repr(store) == (
        "SqlOffsetStore(postgres, postgresql://app@db.example:6543/prod, table=kafka_offsets)"
    )
    keyword = SqlOffsetStore.postgres("host=h user=u password=hunter2 dbname=d", table="o")
    assert "hunter2" not in repr(keyword) and "postgresql://u@h:5432/d" in repr(keyword)
    with pytest.raises(ConfigurationError) as info:
        SqlOffsetStore.postgres("host=h password=hunter2 junk")
    assert "hunter2" not in str(info.value)


def test_mysql_store_hides_the_password() -> None:
    store = SqlOffsetStore.mysql(host="db", user="app", password="hunter2", database="d")
    assert repr(store) == "SqlOffsetStore(mysql, app@db:3306/d, table=kafka_offsets)"
    assert store.placeholder == "%s"


def test_kafka_group_store_config() -> None:
    store = KafkaGroupStore(
        {"kafka.bootstrap.servers": "b:9092", "sasl.password": "hunter2", "client.id": "x"}
    )
    assert dict(store.kafka_config) == {
        "bootstrap.servers": "b:9092",
        "sasl.password": "hunter2",
        "client.id": "x",
    }
    assert "hunter2" not in repr(store)
    assert pickle.loads(pickle.dumps(store)).kafka_config == store.kafka_config
    with pytest.raises(ConfigurationError, match="bootstrap"):
        KafkaGroupStore({})


# -- the SQLite store, in-process ---------------------------------------------------------------


def test_sqlite_store_round_trip_and_exactly_once(tmp_path: Path) -> None:
    with SqlOffsetStore.sqlite(tmp_path / "offsets.db") as store:
        assert store.placeholder == "?"
        store.save("g", [OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 2)])
        assert store.load("g") == {TP0: 5, TP1: 2}
        # Split ranges of one partition are joined: [5, 7) + [7, 9) is the batch [5, 9).
        split = [OffsetRange("t", 0, 7, 9), OffsetRange("t", 0, 5, 7)]
        with store.transaction("g", split) as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS out (v INTEGER)")
            cur.execute("INSERT INTO out VALUES (?)", (1,))
        assert store.load("g", [TP0]) == {TP0: 9}
        with (
            pytest.raises(OffsetConflictError, match="t-0: stored next offset 9"),
            store.transaction("g", split) as cur,
        ):
            cur.execute("INSERT INTO out VALUES (?)", (2,))
        with store.session(write=False) as s:
            s.cursor.execute("SELECT v FROM out")
            assert s.cursor.fetchall() == [(1,)]
        assert already_applied(store, "g", split)


def test_sqlite_store_survives_cloudpickle(tmp_path: Path) -> None:
    # Spark Connect pickles foreachBatch functions, and the store with them.
    from pyspark import cloudpickle

    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    store.save("g", [OffsetRange("t", 0, 0, 4)])
    copy = cloudpickle.loads(cloudpickle.dumps(store))
    assert copy.load("g") == {TP0: 4}
    with copy.transaction("g", [OffsetRange("t", 0, 4, 6)]):
        pass
    assert store.load("g") == {TP0: 6}
    store.close()
    copy.close()


def test_first_transaction_inserts_a_partition_never_stored(tmp_path: Path) -> None:
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    with store.transaction("g", [OffsetRange("t", 0, 0, 3)]):
        pass
    assert store.load("g") == {TP0: 3}
    store.close()


# -- starting offsets -----------------------------------------------------------------------------


def test_starting_offsets_json_from_given_partitions() -> None:
    store = DictStore({TP0: 42, TopicPartition("other", 0): 7})
    text = starting_offsets_json(store, "g", [TP0, TP1])
    assert json.loads(text) == {"t": {"0": 42, "1": -2}}
    assert json.loads(starting_offsets_json(store, "g", [TP1], "latest")) == {"t": {"1": -1}}
    with pytest.raises(ConfigurationError, match="none for t-1"):
        starting_offsets_json(store, "g", [TP0, TP1], "error")
    with pytest.raises(ConfigurationError, match="fallback"):
        starting_offsets_json(store, "g", [TP0], "committed")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="kafka_config"):
        starting_offsets_json(store, "g", ["t"])


def test_already_applied_compares_with_the_ends() -> None:
    store = DictStore({TP0: 10})
    assert already_applied(store, "g", [OffsetRange("t", 0, 5, 10)])
    assert not already_applied(store, "g", [OffsetRange("t", 0, 10, 12)])
    assert not already_applied(store, "g", [OffsetRange("t", 1, 0, 1)])


def test_foreach_batch_helper_needs_a_transactional_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="SqlOffsetStore"):
        exactly_once_foreach_batch(DictStore(), "g", lambda df, i, cur: None)  # type: ignore[arg-type]
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    with pytest.raises(ConfigurationError, match="on_replay"):
        exactly_once_foreach_batch(store, "g", lambda df, i, cur: None, on_replay="ignore")  # type: ignore[arg-type]


def test_importing_the_stores_loads_no_driver_spark_or_kafka_client() -> None:
    # kafka_direct may re-export the stores, and it is imported in every Python worker.
    import subprocess
    import sys

    code = (
        "import sys, kafka_direct.stores; print(sorted(m for m in "
        "('pyspark', 'confluent_kafka', 'psycopg', 'pymysql') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_generic_constructor_with_a_plain_dbapi_factory(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "plain.db"
    # A default sqlite3 connection (implicit transactions), as a user would write it.
    store = SqlOffsetStore(
        lambda: sqlite3.connect(path, check_same_thread=False), "sqlite", table="offs"
    )
    assert repr(store) == "SqlOffsetStore(sqlite, <connection factory>, table=offs)"
    with store.transaction("g", [OffsetRange("t", 0, 0, 2)]) as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS out (v INTEGER)")
        cur.execute("INSERT INTO out VALUES (1)")
    with (
        pytest.raises(OffsetConflictError),
        store.transaction("g", [OffsetRange("t", 0, 0, 2)]) as cur,
    ):
        cur.execute("INSERT INTO out VALUES (2)")
    assert store.load("g") == {TP0: 2}
    check = sqlite3.connect(path)
    assert check.execute("SELECT v FROM out").fetchall() == [(1,)]
    check.close()
    store.close()


@pytest.mark.parametrize("allowed_by", ["attached stream", "argument"])
def test_a_transaction_past_lost_offsets_moves_the_store_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, allowed_by: str
) -> None:
    # Regression (review): a stream with failOnDataLoss=False plans past records that aged out
    # (stored 10, the log now starts at 25); the transaction refused the range on every retry
    # and every restart, so the stream never moved again.
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    store.save("g", [OffsetRange("t", 0, 0, 10)])
    allow_gap = None
    if allowed_by == "attached stream":
        store.attach_stream("g", fail_on_data_loss=False)  # createDirectStream(offsetStore=...)
    else:
        allow_gap = True
    with (
        caplog.at_level(logging.WARNING),
        store.transaction("g", [OffsetRange("t", 0, 25, 30)], allow_gap=allow_gap),
    ):
        pass
    assert store.load("g") == {TP0: 30}
    assert "offsets 10 to 24 were skipped" in caplog.text
    # A store ahead of the range is still a conflict (another writer, or a replay).
    with pytest.raises(OffsetConflictError), store.transaction("g", [OffsetRange("t", 0, 25, 40)]):
        pass
    assert store.load("g") == {TP0: 30}
    store.close()


@pytest.mark.parametrize("attached", [None, True], ids=["no stream", "failOnDataLoss=True"])
def test_a_transaction_past_the_stored_offset_is_refused_by_default(
    tmp_path: Path, attached: bool | None
) -> None:
    # Regression (review): createDirectStream without offsetStore=store started from the Kafka
    # group (nothing committed: auto.offset.reset=latest), past the store's offset; the
    # transaction moved the store on with a warning blaming failOnDataLoss=False, and the
    # records in between were lost.
    store = SqlOffsetStore.sqlite(tmp_path / "o.db")
    with store.transaction("g", [OffsetRange("t", 0, 0, 10)]) as cur:
        cur.execute("CREATE TABLE out (v INTEGER)")
    if attached is not None:
        store.attach_stream("g", fail_on_data_loss=attached)
    with (
        pytest.raises(OffsetConflictError) as info,
        store.transaction("g", [OffsetRange("t", 0, 25, 30)]) as cur,
    ):
        cur.execute("INSERT INTO out VALUES (1)")
    message = str(info.value)
    assert "group 'g'" in message
    assert "t-0: stored next offset 10, but this batch starts at offset 25" in message
    assert "offsets 10 to 24 of t-0 were never written" in message
    assert "pass offsetStore=store to KafkaUtils.createDirectStream" in message
    assert "failOnDataLoss=False" in message
    assert store.load("g") == {TP0: 10}  # nothing moved, nothing written
    with store.session() as s:
        s.cursor.execute("SELECT COUNT(*) FROM out")
        assert s.cursor.fetchone() == (0,)
    # The stream's own next batch, starting where the store stands, goes through.
    with store.transaction("g", [OffsetRange("t", 0, 10, 30)]):
        pass
    assert store.load("g") == {TP0: 30}
    store.close()
