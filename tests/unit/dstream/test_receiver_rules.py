"""The receiver stream's rules (kafka_direct.dstream.receiver.policy, receiver_progress,
receiver_control): the rate limit, block cutting, the pausing rule, restarts, task slots, merged
ranges, and the signals between the driver and its receivers. Pure: table-style, with a fake
clock and tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_direct.dstream.receiver.control import (
    DriverBeacon,
    ReceiverSignals,
    ReceiverStatus,
    check_probe,
    read_status,
    write_probe,
    write_status,
)
from kafka_direct.dstream.receiver.policy import (
    BlockCutter,
    IdleWatch,
    PauseRule,
    RateLimiter,
    RestartPolicy,
    SlotLedger,
    check_slots,
    idle_warning,
    task_slots,
)
from kafka_direct.dstream.receiver.progress import ReceiverBatchInfo, merge_ranges
from kafka_direct.errors import ConfigurationError
from kafka_direct.offsets import OffsetRange


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("pending", "paused"),
    [(0, False), (7, False), (8, True), (9, True), (100, True)],
)
def test_receivers_pause_while_the_log_holds_max_pending_blocks_or_more(
    pending: int, paused: bool
) -> None:
    assert PauseRule(max_pending=8).paused(pending) is paused


def test_the_rate_limiter_allows_one_bursts_worth_then_the_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(50, burst_s=0.2, clock=clock)
    assert limiter.allowance(1000) == 10  # one block interval's worth
    limiter.take(10)
    assert limiter.allowance(1000) == 0
    assert limiter.wait_s() == pytest.approx(0.02)
    clock.now = 0.1
    assert limiter.allowance(1000) == 5
    clock.now = 60.0  # idle for a minute: still one burst, not 3,000 records
    assert limiter.allowance(1000) == 10


def test_no_rate_means_no_limit() -> None:
    limiter = RateLimiter(0, burst_s=0.2, clock=Clock())
    assert not limiter.limited
    assert limiter.allowance(10_000) == 10_000
    assert limiter.wait_s() == 0


@pytest.mark.parametrize(
    ("opened", "now", "size", "due"),
    [
        (None, 10.0, 0, False),  # nothing received: no empty block
        (10.0, 10.1, 100, False),
        (10.0, 10.25, 100, True),  # the block interval is up
        (10.0, 10.05, 8 * 1024 * 1024, True),  # full before its time
    ],
)
def test_a_block_is_cut_at_its_interval_or_when_full(
    opened: float | None, now: float, size: int, due: bool
) -> None:
    assert BlockCutter(interval_s=0.2).due(opened, now, size) is due


def test_a_receiver_is_restarted_until_it_keeps_dying_at_once() -> None:
    policy = RestartPolicy(delay_s=2.0, max_consecutive=3, healthy_after_s=30.0)
    assert policy.failed(1.0).restart  # 1 in a row
    assert policy.failed(120.0).restart  # ran long: the count starts again at 1
    assert policy.failed(1.0).restart  # 2
    decision = policy.failed(1.0)  # 3: given up
    assert (decision.restart, decision.consecutive) == (False, 3)


def test_a_fatal_receiver_error_is_never_restarted() -> None:
    decision = RestartPolicy().failed(500.0, fatal=True)
    assert not decision.restart


@pytest.mark.parametrize(
    ("master", "parallelism", "cpus", "slots", "local"),
    [
        ("local", 1, 1, 1, True),
        ("local[4]", 4, 1, 4, True),
        ("local[*]", 2, 1, 16, True),
        ("local[3, 2]", 3, 1, 3, True),
        ("local[4]", 4, 2, 2, True),
        ("local-cluster[2, 3, 1024]", 6, 1, 6, False),
        ("spark://h:7077", 8, 1, 8, False),
        ("yarn", 12, 4, 3, False),
    ],
)
def test_task_slots_of_each_master(
    master: str, parallelism: int, cpus: int, slots: int, local: bool
) -> None:
    assert task_slots(master, parallelism, cpus, cpu_count=16) == (slots, local)


def test_too_few_local_cores_fail_naming_spark_master_and_what_to_set() -> None:
    check_slots(2, 3, local=True, master="local[3]", task_cpus=1)  # cores > receivers: fine
    with pytest.raises(ConfigurationError) as info:
        check_slots(2, 2, local=True, master="local[2]", task_cpus=1)
    message = str(info.value)
    assert info.value.option == "numReceivers" and info.value.value == 2
    assert "spark.master=local[2]" in message
    assert "spark.master=local[3] or more" in message
    assert "3 slots in all" in message


def test_too_few_cluster_cores_name_the_executor_settings() -> None:
    with pytest.raises(ConfigurationError, match=r"spark\.executor\.instances.*spark\.cores\.max"):
        check_slots(4, 4, local=False, master="spark://h:7077", task_cpus=1)


def test_blocks_that_follow_each_other_merge_and_overlapping_ones_stay_apart() -> None:
    ranges = [
        OffsetRange("t", 0, 10, 20),
        OffsetRange("t", 1, 0, 5),
        OffsetRange("t", 0, 0, 10),
        OffsetRange("t", 0, 21, 30),  # after a transaction marker at 20
        OffsetRange("t", 0, 25, 30),  # received again after a rebalance
    ]
    assert merge_ranges(ranges) == [
        OffsetRange("t", 0, 0, 30),
        OffsetRange("t", 0, 25, 30),
        OffsetRange("t", 1, 0, 5),
    ]


def test_a_receiver_batch_describes_its_blocks() -> None:
    info = ReceiverBatchInfo(
        batch_id=3,
        batch_time=0.0,
        offset_ranges=(OffsetRange("t", 0, 0, 5),),
        num_records=5,
        processing_time_s=0.25,
        scheduling_delay_s=0.0,
        blocks=2,
        recovered_blocks=1,
        paused_receivers=1,
    )
    assert info.describe() == (
        "Batch 3: 5 records in 2 block(s), 1 from an earlier run (t-0 [0, 5)) in 0.250 s, "
        "scheduling delay 0.000 s, 1 receiver(s) paused"
    )
    assert info.numRecords == 5 and info.processingDelay == 250


# -- the driver <-> receiver signals (receiver_control) ------------------------------------------


def test_a_receiver_stops_on_the_marker_on_a_newer_run_and_on_a_silent_driver(
    tmp_path: Path,
) -> None:
    (tmp_path / "control").mkdir()
    beacon = DriverBeacon(str(tmp_path), "run-1")
    beacon.beat()
    clock = Clock()
    signals = ReceiverSignals(str(tmp_path), "run-1", orphan_timeout_s=60, clock=clock)
    assert signals.stop_reason() is None
    clock.now = 59
    beacon.beat()
    assert signals.stop_reason() is None  # the beat changed: the driver is alive
    clock.now = 120  # no beat for 61 s on the receiver's own clock
    assert signals.stop_reason() == "the driver has not been heard from for 60 s"
    beacon.request_stop()
    assert signals.stop_reason() == "the stream is stopping"
    beacon.clear()
    DriverBeacon(str(tmp_path), "run-2").beat()  # a new driver took the directory over
    assert "a newer run of the stream (run-2)" in (signals.stop_reason() or "")
    assert beacon.owner() == "run-2"


def test_the_shared_directory_check_fails_where_the_drivers_token_is_not_seen(
    tmp_path: Path,
) -> None:
    driver, other_node = tmp_path / "driver", tmp_path / "node-2"
    for root in (driver, other_node):
        (root / "control").mkdir(parents=True)
    name, token = write_probe(str(driver))
    assert check_probe(str(driver), name, token)[1] is None
    # Another node whose walDir path is a different (local, not shared) directory.
    _, why = check_probe(str(other_node), name, token)
    assert why is not None and "does not exist there" in why
    (other_node / name).write_text("another driver's token")
    _, why = check_probe(str(other_node), name, token)
    assert why is not None and "holds another token" in why


def test_receiver_status_round_trips_through_its_file(tmp_path: Path) -> None:
    (tmp_path / "control").mkdir()
    status = ReceiverStatus(2, "run-1", state="paused", assignment=["t-0"], records=7)
    write_status(str(tmp_path), status)
    seen = read_status(str(tmp_path), 2)
    assert seen is not None and seen.paused and seen.records == 7 and seen.updated > 0
    assert read_status(str(tmp_path), 3) is None


def test_the_slot_check_counts_the_receivers_of_the_applications_other_streams() -> None:
    # Issue: two streams of one receiver each on local[2] hung silently: each counted only its
    # own receivers against the slots.
    ledger = SlotLedger()
    check_slots(1, 2, local=True, master="local[2]", task_cpus=1, others=ledger.others("a", "r2"))
    ledger.hold("a", "r1", 1)
    assert ledger.others("a", "r2") == 1
    assert ledger.others("a", "r1") == 0  # a stream does not count itself twice
    assert ledger.others("b", "r9") == 0  # another application has slots of its own
    with pytest.raises(ConfigurationError) as info:
        check_slots(
            1, 2, local=True, master="local[2]", task_cpus=1, others=ledger.others("a", "r2")
        )
    message = str(info.value)
    assert "Other receiver streams of this application hold 1 slot(s) already" in message
    assert "3 slots in all" in message and "local[3] or more" in message
    assert "stop another stream" in message
    ledger.release("a", "r1")
    assert ledger.others("a", "r2") == 0


def test_a_receiver_without_partitions_is_reported_once_after_the_delay() -> None:
    watch = IdleWatch(after_s=30)
    assert watch.idle([(0, "starting", False)], now=0) == []  # not subscribed yet
    assert watch.idle([(0, "running", False), (1, "running", True)], now=1) == []
    assert watch.idle([(0, "running", False), (1, "running", True)], now=30.9) == []
    assert watch.idle([(0, "running", False), (1, "running", True)], now=31) == [0]
    assert watch.idle([(0, "running", False)], now=90) == []  # said once
    assert watch.idle([(0, "running", True)], now=91) == []  # got partitions
    assert watch.idle([(0, "paused", False)], now=92) == []  # lost them: a new episode
    assert watch.idle([(0, "paused", False)], now=122) == [0]
    assert watch.idle([(0, "stopped", False)], now=200) == []


def test_the_idle_warning_names_the_group_and_what_to_check() -> None:
    text = idle_warning([0, 1], "billing", ["events"], 30)
    assert text.startswith("Receiver(s) 0, 1 of group 'billing' have had no partition of events")
    for check in ("--describe --group billing", "session.timeout.ms", "more receivers than"):
        assert check in text
