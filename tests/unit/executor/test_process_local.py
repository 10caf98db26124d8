"""ProcessLocal: one value per process, dropped (not closed) in a forked child, closed at exit."""

from __future__ import annotations

import os

import pytest

from kafka_direct.executor.process_local import ProcessLocal


class Value:
    def __init__(self) -> None:
        self.closed = 0


def close(value: Value) -> None:
    value.closed += 1


def test_created_once_per_process() -> None:
    local: ProcessLocal[Value] = ProcessLocal(close)
    first = local.get(Value)
    assert local.get(Value) is first


def test_another_pid_gets_its_own_value_and_closes_only_that(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local: ProcessLocal[Value] = ProcessLocal(close)
    parent = local.get(Value)
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
    child = local.get(Value)
    assert child is not parent
    local.close_at_exit()
    assert (parent.closed, child.closed) == (0, 1)


def test_reset_forgets_without_closing() -> None:
    local: ProcessLocal[Value] = ProcessLocal(close)
    old = local.get(Value)
    local.reset()
    local.close_at_exit()  # nothing to close any more
    assert old.closed == 0
    assert local.get(Value) is not old


def test_a_real_fork_starts_empty() -> None:
    local: ProcessLocal[Value] = ProcessLocal(close)
    parent = local.get(Value)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if it made a value of its own
        os._exit(0 if local.get(Value) is not parent and parent.closed == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parent.closed == 0
