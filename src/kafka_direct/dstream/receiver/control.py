"""How the Spark driver and its receivers talk: small files in ``walDir/control/``. Plain
library (file I/O only, no Spark, no Kafka client): the driver writes the heartbeat and the stop
marker and reads the receivers' status; receivers (executors) do the opposite.

Receivers are long-running Spark tasks, and a Spark task cannot be sent a message, only killed.
Files in the directory they already share are the one channel that works on every cluster:

- ``driver.json``: the current run's id and a beat counter, rewritten every few seconds. A
  receiver stops when the run id is no longer its own (a new driver took over the directory),
  or when the beat has not changed for ``orphan_timeout_s`` by its own clock (its driver died
  without its executors: on a cluster they can outlive it for a while). Clocks of different
  machines are never compared.
- ``stop-RUN``: the stop marker. A receiver that sees it logs its block, commits, leaves the
  group and ends its task; the driver cancels the task only if it does not end in time.
- ``receiver-N.json``: each receiver's status (state, host, pid, assignment, counts, memory, the
  error that killed it), for ``stream.receivers``, the restart log and the tests.

Files are replaced atomically (write, rename), never fsynced: they are signals, not data.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CONTROL",
    "DriverBeacon",
    "ReceiverSignals",
    "ReceiverStatus",
    "append_rejected",
    "read_rejected",
    "read_status",
    "stop_marker",
    "write_status",
]

CONTROL = "control"
_DRIVER = "driver.json"


def _write_json(path: str, data: dict[str, Any]) -> None:
    partial = f"{path}.{uuid.uuid4().hex[:8]}.part"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(partial, path)


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stop_marker(root: str, run: str) -> str:
    return os.path.join(root, CONTROL, f"stop-{run}")


class DriverBeacon:
    """The driver's heartbeat: who the current run is, and that it is alive."""

    def __init__(self, root: str, run: str) -> None:
        self.path = os.path.join(root, CONTROL, _DRIVER)
        self.run = run
        self._beat = 0

    def beat(self) -> None:
        self._beat += 1
        _write_json(self.path, {"run": self.run, "beat": self._beat, "pid": os.getpid()})

    def owner(self) -> str | None:
        """The run that last beat here (None if nobody has)."""
        seen = _read_json(self.path)
        run = None if seen is None else seen.get("run")
        return run if isinstance(run, str) else None

    def request_stop(self) -> None:
        root = os.path.dirname(os.path.dirname(self.path))
        with open(stop_marker(root, self.run), "w", encoding="utf-8") as f:
            f.write("stop\n")

    def clear(self) -> None:
        root = os.path.dirname(os.path.dirname(self.path))
        with contextlib.suppress(FileNotFoundError):
            os.remove(stop_marker(root, self.run))


class ReceiverSignals:
    """What a receiver checks between blocks: should it stop, and why."""

    def __init__(
        self,
        root: str,
        run: str,
        *,
        orphan_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._driver = os.path.join(root, CONTROL, _DRIVER)
        self._marker = stop_marker(root, run)
        self._run = run
        self._timeout_s = orphan_timeout_s
        self._clock = clock
        self._last_beat: object = None
        self._changed_at = clock()

    def stop_reason(self) -> str | None:
        """None to go on; else why this receiver must stop."""
        if os.path.exists(self._marker):
            return "the stream is stopping"
        seen = _read_json(self._driver)
        now = self._clock()
        if seen is not None and seen.get("run") != self._run:
            return f"a newer run of the stream ({seen.get('run')}) owns the directory"
        beat = None if seen is None else seen.get("beat")
        if beat != self._last_beat:
            self._last_beat, self._changed_at = beat, now
        elif now - self._changed_at > self._timeout_s:
            return f"the driver has not been heard from for {self._timeout_s:.0f} s"
        return None


@dataclass
class ReceiverStatus:
    """One receiver, as it last reported itself (``stream.receivers``)."""

    receiver: int
    run: str
    state: str = "starting"  # starting | running | paused | stopped | failed
    host: str = ""
    pid: int = 0
    attempt: int = 0  # how many times the driver has started this receiver, from 0
    assignment: list[str] = field(default_factory=list)
    records: int = 0  # records logged by this attempt
    blocks: int = 0  # blocks logged by this attempt
    commit_failures: int = 0
    pauses: int = 0  # how many times back-pressure paused it
    # Share receivers only (createShareStream):
    redelivered: int = 0  # records logged with a delivery count above 1
    rejected: int = 0  # records rejected after maxDeliveryAttempts
    released: int = 0  # records handed back for another attempt (recordCheck raised)
    lock_expired: int = 0  # records not logged: held past the lock, the broker hands them on
    ack_failures: int = 0  # acknowledgements the broker refused (the records come back)
    accept_refused: int = 0  # of those, ACCEPTs of logged records: each is processed twice
    acked: int = 0  # acknowledgements the broker confirmed
    rss_bytes: int = 0  # the receiver process's resident memory
    error: str | None = None
    fatal: bool = False  # retrying cannot help (a bad setting)
    updated: float = 0.0  # time.time() of the report, on the receiver's clock

    @property
    def paused(self) -> bool:
        return self.state == "paused"


def status_path(root: str, receiver: int) -> str:
    return os.path.join(root, CONTROL, f"receiver-{receiver}.json")


def write_status(root: str, status: ReceiverStatus) -> None:
    status.updated = time.time()
    _write_json(status_path(root, status.receiver), asdict(status))


def read_status(root: str, receiver: int) -> ReceiverStatus | None:
    data = _read_json(status_path(root, receiver))
    if data is None:
        return None
    known = {k: v for k, v in data.items() if k in ReceiverStatus.__dataclass_fields__}
    try:
        return ReceiverStatus(**known)
    except TypeError:
        return None


def append_rejected(root: str, run: str, receiver: int, entry: dict[str, Any]) -> None:
    """A share receiver names a record it rejected: one JSON line in ``control/``."""
    path = os.path.join(root, CONTROL, f"rejected-{run}-r{receiver:03d}.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def read_rejected(root: str) -> list[dict[str, Any]]:
    """Every record the share receivers of this ``walDir`` rejected, oldest run first."""
    directory = os.path.join(root, CONTROL)
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("rejected-"))
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for name in names:
        with (
            contextlib.suppress(OSError),
            open(os.path.join(directory, name), encoding="utf-8") as f,
        ):
            for line in f:
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    return out


def resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def write_probe(root: str) -> tuple[str, str]:
    """The driver's half of the shared-directory check: a token file only it could have
    written. Returns (its path relative to walDir, the token)."""
    token = uuid.uuid4().hex
    name = os.path.join(CONTROL, f"probe-{token[:12]}")
    path = os.path.join(root, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(token)
        f.flush()
        os.fsync(f.fileno())
    return name, token


def check_probe(root: str, name: str, token: str) -> tuple[str, str | None]:
    """The executors' half, run as a Spark task: (host, None) when this process sees the
    driver's token in ``walDir`` and can write there, else (host, what went wrong)."""
    host = os.uname().nodename
    path = os.path.join(root, name)
    try:
        with open(path, encoding="utf-8") as f:
            seen = f.read().strip()
    except FileNotFoundError:
        return host, f"the driver's probe file {path} does not exist there"
    except OSError as exc:
        return host, f"reading {path} failed: {type(exc).__name__}: {exc}"
    if seen != token:
        return host, f"{path} there holds another token: it is not the driver's directory"
    mine = os.path.join(root, CONTROL, f"probe-{uuid.uuid4().hex[:12]}.{host}")
    try:
        with open(mine, "w", encoding="utf-8") as f:
            f.write(host)
        os.remove(mine)
    except OSError as exc:
        return host, f"writing in {os.path.dirname(mine)} failed: {type(exc).__name__}: {exc}"
    return host, None
