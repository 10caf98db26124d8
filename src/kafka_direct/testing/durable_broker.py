"""The embedded Tansu broker on durable S3 storage, for crash tests. Plain library: the user's
test process.

The in-memory broker (:class:`kafka_direct.testing.broker.EmbeddedBroker`) loses every topic when it
dies, so it can only be paused. :class:`DurableBroker` runs the same Tansu binary with
``--storage-engine s3://BUCKET/`` against a local S3 server (``moto_server`` from
``moto[server]``): SIGKILL the broker with :meth:`DurableBroker.crash`, start it again with
:meth:`DurableBroker.restart` on the same port, and every acknowledged record is still there::

    with DurableBroker() as broker:
        ...produce to broker.bootstrap_servers...
        broker.crash()
        broker.restart()
        ...read everything back...

Watermarks on this storage are worse than in memory (BROKER.md item 1). ListOffsets(latest)
answers *(base offset of the most recently written batch object) + 1*, and moto keeps an
object's modification time to the second, so among batches written in the same second the
*lowest* wins. To make ``latest`` exact, flush the data, wait more than a second, then send the
final record of each partition on its own (:data:`WATERMARK_SETTLE_S`). Fetches are not affected:
every record is returned.

Clients reconnect to the restarted broker by themselves. A client that was connected when it
crashed may get one ``_NOENT`` ("No leaders found") from ``list_offsets`` right after the
restart, while it reconnects (about half a second here): code under test should retry it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from kafka_direct.errors import EmbeddedBrokerError
from kafka_direct.testing.broker import EmbeddedBroker
from kafka_direct.testing.ports import free_port

__all__ = ["WATERMARK_SETTLE_S", "DurableBroker"]

logger = logging.getLogger(__name__)

#: How long to wait before the final single-record batch so that ``latest`` is exact (see above).
WATERMARK_SETTLE_S = 1.1
_PORT_ATTEMPTS = 3
_POLL_INTERVAL_S = 0.05
# moto accepts any credentials; Tansu's S3 client insists on having some.
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


class _S3Tansu(EmbeddedBroker):
    """One Tansu process on S3 storage. A crash or a restart makes a new one on the same port.

    ``EmbeddedBroker`` launches ``_command`` with the parent's environment and has no hook for
    more variables, so the command goes through ``env NAME=VALUE ...``: ``env`` execs Tansu in
    the same process, so the pid, the process group and the readiness probe are unchanged.
    """

    def __init__(
        self,
        storage_url: str,
        environment: dict[str, str],
        *,
        host: str,
        port: int | None,
        startup_timeout_s: float,
        binary: str | None,
        log_file: Path,
    ) -> None:
        super().__init__(
            port=port,
            host=host,
            startup_timeout_s=startup_timeout_s,
            binary=binary,
            log_file=log_file,
        )
        self._storage_url = storage_url
        self._environment = environment

    def _command(self, binary: str, port: int) -> list[str]:
        env_binary = shutil.which("env") or "/usr/bin/env"
        assignments = [f"{name}={value}" for name, value in sorted(self._environment.items())]
        tansu = super()._command(binary, port)
        return [env_binary, *assignments, *tansu, "--storage-engine", self._storage_url]

    def crash(self) -> None:
        """SIGKILL the process group: no shutdown and no draining of connections. Then reap it."""
        self._kill()
        self.stop()


class DurableBroker:
    """Tansu on a moto S3 bucket: survives :meth:`crash` and :meth:`restart` without data loss.

    Nothing starts in ``__init__``. :meth:`start` starts moto, creates the bucket, then starts
    Tansu and waits until it answers metadata. Logs of both go to a temporary directory, which
    :meth:`stop` removes. Needs ``moto[server]`` (in kafka_direct's ``dev`` extra).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        bucket: str = "tansu",
        startup_timeout_s: float = 30.0,
        binary: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.bucket = bucket
        self.startup_timeout_s = startup_timeout_s
        self.binary = binary
        self.s3_port: int | None = None
        self._dir: Path | None = None
        self._moto: subprocess.Popen[bytes] | None = None
        self._broker: _S3Tansu | None = None
        self._stopped = False

    @property
    def bootstrap_servers(self) -> str:
        if self._broker is None or self.port is None:
            raise EmbeddedBrokerError("The durable broker is not started: call start() first.")
        return f"{self.host}:{self.port}"

    @property
    def s3_endpoint(self) -> str:
        if self.s3_port is None:
            raise EmbeddedBrokerError("The durable broker's S3 server is not started.")
        return f"http://{self.host}:{self.s3_port}"

    @property
    def log_dir(self) -> Path | None:
        """Where ``tansu.log`` and ``moto.log`` are, while the broker is not stopped."""
        return self._dir

    def start(self) -> DurableBroker:
        if self._moto is not None or self._stopped:
            raise EmbeddedBrokerError(
                f"{self!r} was already started; use restart() after crash(), or a new "
                "DurableBroker after stop()."
            )
        if importlib.util.find_spec("moto") is None:
            raise EmbeddedBrokerError(
                "DurableBroker needs a local S3 server from 'moto[server]', which is not "
                "installed. Install it with: pip install 'moto[server]'."
            )
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-direct-durable-"))
        atexit.register(self.stop)
        try:
            self._start_moto()
            self._create_bucket()
            self._start_broker()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_moto(self) -> None:
        assert self._dir is not None
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.s3_port = port = free_port(self.host)
            command = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(port)]
            with open(self._dir / "moto.log", "ab") as log:
                # A session of its own, so stop() signals its group and a Ctrl-C in the user's
                # terminal does not take S3 away before the broker.
                self._moto = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + self.startup_timeout_s
            while self._moto.poll() is None and time.monotonic() < deadline:
                if self._s3_request("GET", "/") is not None:
                    logger.info("moto S3 server ready at %s", self.s3_endpoint)
                    return
                time.sleep(_POLL_INTERVAL_S)
            code = self._moto.poll()
            self._stop_moto()
            # Only a lost race for the port is worth another try.
            if code is None or attempt == _PORT_ATTEMPTS:
                break
        raise EmbeddedBrokerError(
            f"The moto S3 server did not start on {self.host}:{self.s3_port} within "
            f"{self.startup_timeout_s:g} s. Last lines of its log:\n{self._tail('moto.log')}"
        )

    def _s3_request(self, method: str, path: str) -> int | None:
        """HTTP status of a request to moto, or None if it does not answer (yet)."""
        request = urllib.request.Request(self.s3_endpoint + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return None

    def _create_bucket(self) -> None:
        # moto does not check signatures, so a plain PUT creates the bucket.
        status = self._s3_request("PUT", f"/{self.bucket}")
        if status != 200:
            raise EmbeddedBrokerError(
                f"Could not create S3 bucket '{self.bucket}' on {self.s3_endpoint}: HTTP {status}."
                f" Last lines of moto's log:\n{self._tail('moto.log')}"
            )

    def _start_broker(self) -> None:
        assert self._dir is not None
        broker = _S3Tansu(
            f"s3://{self.bucket}/",
            {**_AWS_ENV, "AWS_ENDPOINT": self.s3_endpoint},
            port=self.port,
            host=self.host,
            startup_timeout_s=self.startup_timeout_s,
            binary=self.binary,
            log_file=self._dir / "tansu.log",
        )
        broker.start()
        # The first start chose a free port; every restart reuses it so clients reconnect.
        self.port = broker.port
        self._broker = broker

    def is_running(self) -> bool:
        return self._broker is not None and self._broker.is_running()

    def crash(self) -> None:
        """SIGKILL the broker. S3 (moto) keeps running with everything acknowledged so far."""
        if self._broker is None or not self._broker.is_running():
            raise EmbeddedBrokerError(f"Cannot crash {self!r}: the broker is not running.")
        self._broker.crash()
        logger.info("Durable broker on port %s killed (SIGKILL)", self.port)

    def restart(self) -> None:
        """Start the broker again on the same port and bucket; wait until it answers metadata.

        A broker that is still running is crashed first.
        """
        if self._moto is None or self._broker is None:
            raise EmbeddedBrokerError(f"Cannot restart {self!r}: start() it first.")
        if self._broker.is_running():
            self._broker.crash()
        self._start_broker()

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP) until :meth:`resume`. S3 keeps answering."""
        if self._broker is None:
            raise EmbeddedBrokerError(f"Cannot pause {self!r}: it is not started.")
        self._broker.pause()

    def resume(self) -> None:
        if self._broker is None:
            raise EmbeddedBrokerError(f"Cannot resume {self!r}: it is not started.")
        self._broker.resume()

    def stop(self) -> None:
        """Kill the broker and moto, remove the logs and the bucket's data. Idempotent."""
        atexit.unregister(self.stop)
        if self._broker is not None:
            # Storage goes away with moto, so a graceful drain would only cost time.
            self._broker.crash()
            self._broker = None
        self._stop_moto()
        self._stopped = True
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _stop_moto(self) -> None:
        if self._moto is None:
            return
        if self._moto.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._moto.pid, signal.SIGKILL)
        self._moto.wait()
        self._moto = None

    def _tail(self, name: str, lines: int = 20) -> str:
        if self._dir is None or not (self._dir / name).exists():
            return "<no log>"
        text = (self._dir / name).read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "<empty log>"

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the broker's log, for error messages."""
        return self._tail("tansu.log", lines)

    def __enter__(self) -> DurableBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        if self._moto is None:
            state = "stopped" if self._stopped else "not started"
        else:
            state = "running" if self.is_running() else "crashed"
        return f"DurableBroker({self.host}:{self.port or '?'}, s3://{self.bucket}/, {state})"
