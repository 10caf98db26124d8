"""Running receiver_driver.py as Spark applications of their own, for the receiver-stream tests:
start, watch their status files and SQLite sinks, stop them gracefully or SIGKILL them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("receiver_driver.py")


def receiver_stream(topic: str, work: Path, **extra: Any) -> dict[str, Any]:
    """One ``receiver_driver.py`` stream named "s": one receiver of group ``g-TOPIC`` with the
    write-ahead log in ``work/wal``, into ``work/sink.db``; ``extra`` adds or overrides keys."""
    return {
        "name": "s",
        "topic": topic,
        "group": f"g-{topic}",
        "receivers": 1,
        "wal": True,
        "wal_dir": str(work / "wal"),
        "db": str(work / "sink.db"),
        **extra,
    }


def sink_rows(db: Path | str) -> list[tuple[str, int, int, bytes]]:
    """Every distinct record in a sink, sorted."""
    if not Path(db).exists():
        return []
    try:
        with sqlite3.connect(db) as conn:
            return sorted(conn.execute("SELECT topic, partition, offset, value FROM records"))
    except sqlite3.OperationalError:
        return []  # the driver has not created the table yet


def deliveries(db: Path | str) -> int:
    """How many rows the batch function received in all (repeats included)."""
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM deliveries").fetchone()[0])


class App:
    """One driver process running the streams of ``spec``."""

    def __init__(self, workdir: Path, name: str, spec: dict[str, Any]) -> None:
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.control = self.dir / "control"
        self.spec = {**spec, "control": str(self.control)}
        self.spec_path = self.dir / "spec.json"
        self.spec_path.write_text(json.dumps(self.spec))
        self.log = self.dir / "driver.log"
        self.worker_log = self.dir / "workers.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> App:
        (self.control / "stop").unlink(missing_ok=True)
        for status in self.control.glob("*.json"):
            status.unlink()
        self.runs += 1
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(sys.path),
            KAFKA_DIRECT_LOG_FILE=str(self.worker_log),
            KAFKA_DIRECT_LOG_LEVEL="INFO",
        )
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), str(self.spec_path), f"run{self.runs}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # so a kill takes the JVM and its Python workers too
            )
        return self

    def status(self, stream: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.control / f"{stream}.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-4000:]

    def wait(self, condition: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"driver exited ({self.proc.returncode}) waiting for {what}; log:\n"
                    f"{self.tail()}"
                )
            for name in [s["name"] for s in self.spec["streams"]]:
                status = self.status(name)
                if status and status.get("error"):
                    raise AssertionError(f"stream {name} failed waiting for {what}: {status}")
            time.sleep(0.2)
        raise AssertionError(
            f"timed out after {timeout_s} s waiting for {what}; log:\n{self.tail()}"
        )

    def wait_rows(self, db: Path | str, count: int, timeout_s: float = 300.0) -> None:
        self.wait(lambda: len(sink_rows(db)) >= count, f"{count} rows in {db}", timeout_s)

    def request_stop(self) -> None:
        """Ask the driver to stop every stream gracefully (see :meth:`stop`)."""
        (self.control / "stop").write_text("stop")

    def stop(self, timeout_s: float = 90.0) -> None:
        """Graceful: the driver stops every stream (receivers first, then a last batch)."""
        self.request_stop()
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"driver did not stop within {timeout_s} s:\n{self.tail()}"
            ) from None
        assert code == 0, f"driver exited with {code}:\n{self.tail()}"

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and its Python workers, as a crashed machine would."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
