"""How the Spark driver and its receivers talk: small files in ``walDir/control/``. Plain
library (file I/O only, no Spark, no Kafka client): the driver writes the heartbeat and the stop
marker and reads the receivers' status; receivers (executors) do the opposite.

Receivers are long-running Spark tasks, and a Spark task cannot be sent a message, only killed.
Files in the directory they already share are the one channel that works on every cluster:

- ``driver.json``: the current run's id and a beat counter, rewritten every few seconds (and
  marked ``stopped`` when the run ends). A receiver stops when the run id is no longer its own
  (a new driver took over the directory), or when the beat has not changed for
  ``orphan_timeout_s`` by its own clock (its driver died without its executors: on a cluster
  they can outlive it for a while). A starting driver takes the directory over only once no
  other run's beat advances (:meth:`DriverBeacon.claim`): the running stream keeps its
  directory, and the new one is refused. Clocks of different machines are never compared.
- ``stop-RUN``: the stop marker. A receiver that sees it logs its block, commits, leaves the
  group and ends its task; the driver cancels the task only if it does not end in time.
- ``receiver-N-aM.json``: the status of receiver N's attempt M (state, host, pid, assignment,
  counts, memory, the error that killed it), for ``stream.receivers``, the restart log and the
  tests. One file per attempt: a restarted receiver never overwrites the counts its dead
  attempt reported last, so the driver still adds them up.

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

from kafka_direct.errors import ConfigurationError

__all__ = [
    "CONTROL",
    "DriverBeacon",
    "ReceiverSignals",
    "ReceiverStatus",
    "RejectionReader",
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


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _process_gone(seen: dict[str, Any]) -> bool:
    """The driver that wrote ``seen`` ran on this host, and its process no longer exists."""
    pid = seen.get("pid")
    if seen.get("host") != os.uname().nodename or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists, as another user's
    return False


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

    def beat(self, *, stopped: bool = False) -> None:
        self._beat += 1
        _write_json(
            self.path,
            {
                "run": self.run,
                "beat": self._beat,
                "pid": os.getpid(),
                "host": os.uname().nodename,
                "stopped": stopped,
            },
        )

    def release(self) -> None:
        """The run has ended: a driver starting next need not wait for this one's beat."""
        if self.owner() == self.run:
            self.beat(stopped=True)

    def claim(
        self,
        *,
        wait_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> str | None:
        """Take the directory over, and return the run taken over from (None if no other run
        held it). At once when no other run has beaten here, the last one stopped, or its
        process is gone; else once its beat has stood still for ``wait_s``. While it advances,
        another driver runs a stream on this directory: refused, naming ``walDir``."""
        seen = _read_json(self.path)
        other = None if seen is None else seen.get("run")
        if seen is None or other == self.run or seen.get("stopped") or _process_gone(seen):
            self.beat()
            return None if seen is None or seen.get("stopped") else _text(other)
        deadline = clock() + wait_s
        while clock() < deadline:
            sleep(min(0.25, wait_s))
            now = _read_json(self.path)
            if now is None or now.get("stopped"):
                break
            if (now.get("run"), now.get("beat")) != (other, seen.get("beat")):
                root = os.path.dirname(os.path.dirname(self.path))
                raise ConfigurationError(
                    "walDir",
                    root,
                    "a directory no running stream uses",
                    f"Another run of a stream ({now.get('run')}, pid {now.get('pid')} on "
                    f"{now.get('host', '?')}) is running on it: its heartbeat in "
                    f"{self.path} advances. Stop that stream first, or give this one its "
                    "own walDir.",
                )
        self.beat()
        return _text(other)

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
    logged_late: int = 0  # records held past the lock on the group's last delivery: logged
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


def status_path(root: str, receiver: int, attempt: int = 0) -> str:
    return os.path.join(root, CONTROL, f"receiver-{receiver}-a{attempt}.json")


def write_status(root: str, status: ReceiverStatus) -> None:
    status.updated = time.time()
    _write_json(status_path(root, status.receiver, status.attempt), asdict(status))


def read_status(root: str, receiver: int, attempt: int = 0) -> ReceiverStatus | None:
    data = _read_json(status_path(root, receiver, attempt))
    if data is None:
        return None
    known = {k: v for k, v in data.items() if k in ReceiverStatus.__dataclass_fields__}
    try:
        return ReceiverStatus(**known)
    except TypeError:
        return None


def remove_status(root: str, receiver: int, attempt: int) -> None:
    with contextlib.suppress(OSError):
        os.remove(status_path(root, receiver, attempt))


def clear_statuses(root: str) -> None:
    """Delete every receiver status file (those of earlier runs, at start)."""
    directory = os.path.join(root, CONTROL)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            if name.startswith("receiver-") and name.endswith(".json"):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, name))


def _rejected_files(root: str) -> list[str]:
    directory = os.path.join(root, CONTROL)
    try:
        return sorted(n for n in os.listdir(directory) if n.startswith("rejected-"))
    except FileNotFoundError:
        return []


def append_rejected(root: str, run: str, receiver: int, entry: dict[str, Any]) -> None:
    """A share receiver names a record it rejected: one JSON line in ``control/``."""
    path = os.path.join(root, CONTROL, f"rejected-{run}-r{receiver:03d}.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def read_rejected(root: str) -> list[dict[str, Any]]:
    """Every record the share receivers of this ``walDir`` rejected, oldest run first."""
    return RejectionReader(root).read_new()


class RejectionReader:
    """The driver's reader of the rejection files: each call returns only the lines written
    since the last one, in every file (a byte offset per file), so its cost is the new
    rejections, and a receiver that rejects after another is never mixed up with it."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._read: dict[str, int] = {}

    def skip_existing(self) -> None:
        """Start after what the files hold now (rejections of earlier runs)."""
        for name in _rejected_files(self.root):
            with contextlib.suppress(OSError):
                self._read[name] = os.path.getsize(os.path.join(self.root, CONTROL, name))

    def read_new(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for name in _rejected_files(self.root):
            start = self._read.get(name, 0)
            try:
                with open(os.path.join(self.root, CONTROL, name), "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            # A line being appended right now has no newline yet: it is read next time.
            complete = data[: data.rfind(b"\n") + 1]
            self._read[name] = start + len(complete)
            for line in complete.splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict):
                        out.append(entry)
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
