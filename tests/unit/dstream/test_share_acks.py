"""A share stream's acknowledgement bookkeeping (kafka_direct.dstream.receiver.share_acks): what a
refused acknowledgement means for its record, the driver's per-batch deltas of the receivers'
lock counters across restarts, and the warning that names the setting to change. Pure: no broker.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from kafka_direct.dstream.receiver.share_acks import (
    ACCEPT,
    REJECT,
    RELEASE,
    AckLedger,
    AckOutcome,
    LockCounts,
    LockWatch,
    lock_warning,
)


class TP(NamedTuple):
    topic: str
    partition: int


T0, T1 = TP("t", 0), TP("t", 1)


@pytest.mark.parametrize(
    ("sent", "answer", "refused", "expected"),
    [
        # Confirmed: whatever they said.
        ([(0, 1, ACCEPT), (0, 2, RELEASE)], {T0: {1, 2}}, False, AckOutcome(2, 0, 0)),
        # Refused ACCEPTs: logged records that come back, each processed twice.
        ([(0, 1, ACCEPT), (0, 2, ACCEPT)], {T0: {1, 2}}, True, AckOutcome(0, 2, 0)),
        # Refused RELEASE / REJECT (a poll held past its lock): nothing logged, nothing repeated.
        ([(0, 1, RELEASE), (0, 2, REJECT)], {T0: {1, 2}}, True, AckOutcome(0, 0, 2)),
        # Mixed, per partition: only the answered partition settles.
        (
            [(0, 1, ACCEPT), (1, 1, RELEASE), (1, 2, ACCEPT)],
            {T1: {1, 2}},
            True,
            AckOutcome(0, 1, 1),
        ),
        # Unknown to the ledger: counted as an ACCEPT (an upper bound on repeats).
        ([], {T0: {9}}, True, AckOutcome(0, 1, 0)),
        # Re-acquired and acknowledged again: the newest acknowledgement counts.
        ([(0, 1, RELEASE), (0, 1, ACCEPT)], {T0: {1}}, True, AckOutcome(0, 1, 0)),
        # No offsets (the client may answer with None): nothing.
        ([(0, 1, ACCEPT)], None, True, AckOutcome()),
    ],
)
def test_a_refusal_means_what_the_acknowledgement_said(
    sent: list[tuple[int, int, str]], answer: Any, refused: bool, expected: AckOutcome
) -> None:
    ledger = AckLedger()
    for partition, offset, kind in sent:
        ledger.note("t", partition, offset, kind)
    assert ledger.settle(answer, refused) == expected


def test_a_settled_acknowledgement_is_forgotten_and_the_ledger_is_bounded() -> None:
    ledger = AckLedger(limit=3)
    for offset in range(5):
        ledger.note("t", 0, offset, RELEASE)
    assert len(ledger) == 3  # offsets 0 and 1 forgotten
    assert ledger.settle({T0: {0, 4}}, refused=True) == AckOutcome(0, 1, 1)
    assert len(ledger) == 2


@pytest.mark.parametrize(
    ("batches", "expected"),
    [
        # (receiver, attempt, lock_expired, accept_refused) per report, one list per batch.
        ([[(0, 0, 0, 0)], [(0, 0, 0, 0)]], [(0, 0), (0, 0)]),
        ([[(0, 0, 100, 0)], [(0, 0, 100, 0)], [(0, 0, 130, 5)]], [(100, 0), (0, 0), (30, 5)]),
        # Two receivers add up.
        ([[(0, 0, 3, 1), (1, 0, 4, 2)]], [(7, 3)]),
        # A restarted receiver (attempt 1) starts from 0: its counts are new, not a drop.
        ([[(0, 0, 50, 10)], [(0, 1, 20, 0)], [(0, 1, 25, 0)]], [(50, 10), (20, 0), (5, 0)]),
        # A status read back lower (never happens in order; a re-read): never counted back.
        ([[(0, 0, 10, 0)], [(0, 0, 0, 0)], [(0, 0, 12, 0)]], [(10, 0), (0, 0), (2, 0)]),
    ],
)
def test_the_driver_counts_what_receivers_reported_since_the_last_batch(
    batches: list[list[tuple[int, int, int, int]]], expected: list[tuple[int, int]]
) -> None:
    watch = LockWatch()
    seen = []
    for reports in batches:
        counts = watch.since_last(reports)
        seen.append((counts.lock_expired, counts.refused_accepts))
    assert seen == expected


@pytest.mark.parametrize(
    ("counts", "says", "not_says"),
    [
        (LockCounts(12, 0), "held 12 record(s) past their lock", "refused"),
        (LockCounts(0, 7), "acknowledgements of 7 logged record(s) refused", "past their lock"),
        (LockCounts(2, 3), "past their lock before logging them (not logged", None),
    ],
)
def test_the_lock_warning_names_the_setting_its_value_and_the_fix(
    counts: LockCounts, says: str, not_says: str | None
) -> None:
    text = lock_warning("s1", "billing", 2000, counts)
    assert says in text
    assert "share group 'billing''s config share.record.lock.duration.ms, now 2000 ms" in text
    assert "--entity-name billing --alter --add-config share.record.lock.duration.ms=N" in text
    assert "group.share.max.record.lock.duration.ms" in text
    if not_says is not None:
        assert not_says not in text
    assert not LockCounts() and counts
