"""The receiver's ledger of failed commits (kafka_direct.dstream.receiver.commit_ledger), table
by table: what a commit carries, what a refusal leaves owed, and what a returning partition
commits before it fetches."""

from __future__ import annotations

import pytest

from kafka_direct.dstream.receiver.commit_ledger import CommitLedger

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def ledger(owed: dict[tuple[str, int], int]) -> CommitLedger:
    book = CommitLedger()
    book.owed = dict(owed)
    return book


@pytest.mark.parametrize(
    ("owed", "logged", "assigned", "carried"),
    [
        ({}, {A: 5}, [A], {A: 5}),
        ({B: 3}, {A: 5}, [A, B], {A: 5, B: 3}),  # a debt rides with the next block
        ({B: 3}, {A: 5}, [A], {A: 5}),  # never for a partition now elsewhere
        ({A: 9}, {A: 5}, [A], {A: 9}),  # never below what is owed
        ({A: 4}, {A: 5}, [A], {A: 5}),
        ({A: 4}, {}, [A], {A: 4}),  # a retry
        ({A: 4}, {}, [], {}),
    ],
)
def test_what_a_commit_carries(
    owed: dict[tuple[str, int], int],
    logged: dict[tuple[str, int], int],
    assigned: list[tuple[str, int]],
    carried: dict[tuple[str, int], int],
) -> None:
    assert ledger(owed).request(logged, assigned) == carried


@pytest.mark.parametrize(
    ("owed", "offsets", "ok", "after"),
    [
        ({}, {A: 5}, False, {A: 5}),
        ({A: 3}, {A: 5, B: 2}, False, {A: 5, B: 2}),
        ({A: 7}, {A: 5}, False, {A: 7}),
        ({A: 5, B: 2}, {A: 5, B: 2}, True, {}),
        ({A: 5, C: 1}, {A: 5}, True, {C: 1}),  # a debt it did not carry stays
        ({A: 7}, {A: 5}, True, {A: 7}),  # a smaller commit does not settle a larger debt
    ],
)
def test_what_a_commits_outcome_leaves_owed(
    owed: dict[tuple[str, int], int],
    offsets: dict[tuple[str, int], int],
    ok: bool,
    after: dict[tuple[str, int], int],
) -> None:
    book = ledger(owed)
    book.settled(offsets, ok)
    assert book.owed == after


@pytest.mark.parametrize(
    ("owed", "committed", "reclaim", "after"),
    [
        ({A: 5}, {A: None}, {A: 5}, {A: 5}),  # the group has no offset
        ({A: 5}, {A: 2}, {A: 5}, {A: 5}),  # behind: commit before fetching
        ({A: 5}, {A: 5}, {}, {}),
        ({A: 5}, {A: 8}, {}, {}),  # another member read further: left alone, dropped
        ({A: 5, B: 4}, {A: 8, B: 1}, {B: 4}, {B: 4}),
        ({A: 5}, {C: 1}, {}, {A: 5}),  # not asked about
    ],
)
def test_what_a_returning_partition_commits(
    owed: dict[tuple[str, int], int],
    committed: dict[tuple[str, int], int | None],
    reclaim: dict[tuple[str, int], int],
    after: dict[tuple[str, int], int],
) -> None:
    book = ledger(owed)
    assert book.reclaim(committed) == reclaim
    assert book.owed == after  # reclaimed debts stay until their commit is settled


def test_returning_names_only_the_owed_partitions_just_assigned() -> None:
    assert ledger({A: 5, C: 2}).returning([A, B]) == [A]
    assert ledger({}).returning([A]) == []
