"""Unit tests for how a replayed exactly-once task checks its rows against its marker: always
with the scheme that wrote the marker (kafka_direct.producer.transactional._replay_digest), so
that a replay after an upgrade from the BLAKE2b scheme is neither refused nor unchecked. No
broker, no Spark: the replay's digest and :func:`check_replay`, as ``write_transaction`` runs
them."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

import kafka_direct.producer.digest as row_digest
from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.producer.columns import plan_columns
from kafka_direct.producer.digest import BLAKE2B_SCHEME, XXH3_SCHEME, RowCount, RowDigest
from kafka_direct.producer.markers import (
    Marker,
    ReplayMismatchError,
    TaskIdentity,
    TransactionSettings,
    check_replay,
)
from kafka_direct.producer.transactional import _replay_digest
from kafka_direct.producer.write import WriteSettings

COLUMNS = plan_columns([("key", "binary"), ("value", "binary")], "out")
TASK = TaskIdentity(0, batch_id=4)
TXN_ID = "q-0"


def _settings(check_rows: bool = True) -> WriteSettings:
    txn = TransactionSettings("q", "markers", check_rows=check_rows)
    return WriteSettings(KafkaConfig({"bootstrap.servers": "b:1"}), COLUMNS, 1000, transactions=txn)


def _batch(values: list[bytes]) -> pa.RecordBatch:
    keys = pa.array([f"k{i}".encode() for i in range(len(values))], pa.binary())
    return pa.RecordBatch.from_arrays([keys, pa.array(values, pa.binary())], ["key", "value"])


COMMITTED = _batch([b"a", b"b", b"c"])
OTHER = _batch([b"a", b"b", b"d"])


def _marker(scheme: str | None) -> Marker:
    """The marker an earlier attempt committed over COMMITTED, with a digest of ``scheme``."""
    digest = None
    if scheme is not None:
        d = RowDigest(COLUMNS, scheme)
        d.update(COMMITTED)
        digest = d.hexdigest()
    return Marker(COMMITTED.num_rows, TASK.batch_id, None, 0, digest)


def _replay(marker: Marker, batch: pa.RecordBatch, settings: WriteSettings | None = None) -> None:
    digest = _replay_digest(settings or _settings(), marker, TXN_ID)
    digest.update(batch)
    check_replay(marker, TASK, digest.rows, TXN_ID, digest.hexdigest())


@pytest.mark.parametrize("scheme", [BLAKE2B_SCHEME, XXH3_SCHEME])
def test_a_replay_is_checked_with_its_markers_scheme(scheme: str) -> None:
    """Markers of either scheme: the same rows pass, other rows (the same count) are refused.
    A BLAKE2b marker is one that kafka_direct wrote before XXH3, or a build without C."""
    marker = _marker(scheme)
    digest = _replay_digest(_settings(), marker, TXN_ID)
    assert isinstance(digest, RowDigest) and digest.scheme == scheme
    _replay(marker, COMMITTED)
    with pytest.raises(ReplayMismatchError, match="as many rows but other ones"):
        _replay(marker, OTHER)


def test_without_a_digest_or_with_count_checks_only_the_count_is_compared() -> None:
    assert isinstance(_replay_digest(_settings(), _marker(None), TXN_ID), RowCount)
    _replay(_marker(None), OTHER)
    counting = _settings(check_rows=False)
    assert isinstance(_replay_digest(counting, _marker(XXH3_SCHEME), TXN_ID), RowCount)
    _replay(_marker(XXH3_SCHEME), OTHER, counting)
    with pytest.raises(ReplayMismatchError, match="this replay holds 2 row"):
        _replay(_marker(None), COMMITTED.slice(1))


def test_a_scheme_this_worker_cannot_compute_is_checked_by_its_count_and_said(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An XXH3 marker replayed by a build without the C extension, and a marker of a scheme
    from a newer kafka_direct: the count is still checked, and a warning names why no more."""
    marker = Marker(3, TASK.batch_id, None, 0, "rowsum9:" + "0" * 32)
    caplog.set_level(logging.WARNING, logger="kafka_direct.producer.transactional")
    assert isinstance(_replay_digest(_settings(), marker, TXN_ID), RowCount)
    assert "scheme 'rowsum9'" in caplog.text and "a newer kafka_direct wrote it" in caplog.text
    with pytest.raises(ReplayMismatchError):
        _replay(marker, COMMITTED.slice(1))
    xxh3 = _marker(XXH3_SCHEME)
    monkeypatch.setattr(row_digest, "_native_sum", None)  # no C extension
    caplog.clear()
    assert isinstance(_replay_digest(_settings(), xxh3, TXN_ID), RowCount)
    assert "C extension _row_digest" in caplog.text
    blake = _marker(BLAKE2B_SCHEME)  # hashlib computes it without C
    digest = _replay_digest(_settings(), blake, TXN_ID)
    assert isinstance(digest, RowDigest) and digest.scheme == BLAKE2B_SCHEME
    with pytest.raises(ReplayMismatchError):
        _replay(blake, OTHER)
