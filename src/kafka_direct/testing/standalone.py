"""A real Spark standalone cluster on loopback, for tests that need executors to die. Plain
library: the user's test process starts the daemons; :func:`standalone_session` runs in the
driver (the same process, or another one given :attr:`StandaloneCluster.master_url`).

``local[N]`` runs every executor thread inside the driver's JVM, so nothing can be killed but the
driver. :class:`StandaloneCluster` starts a master and N workers with the installed PySpark's
``bin/spark-class``; each worker launches its application's executor as a child JVM, which
starts the Python workers. Each daemon is in a process group of its own, so
:meth:`StandaloneCluster.kill_worker` SIGKILLs a worker together with its executor and Python
workers, as if the machine had died::

    with StandaloneCluster(workers=2) as cluster:
        spark = cluster.session("my-test")      # kafka_direct registered, 2 executors up
        ...
        cluster.kill_worker(0)                  # the job goes on with the other executor

Spark allows one SparkContext per process: stop any other session before :meth:`session`, or
run the driver in a subprocess with :func:`standalone_session`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kafka_direct.errors import EmbeddedBrokerError
from kafka_direct.testing.ports import free_port

__all__ = ["StandaloneCluster", "standalone_session", "wait_for_executors"]

logger = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.1
_MASTER_ATTEMPTS = 3
_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# One GC thread and no C2 compiler: short-lived test JVMs on a small machine start faster.
_FAST_START_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def standalone_session(
    master_url: str,
    app_name: str = "kafka_direct",
    conf: Mapping[str, str] | None = None,
    *,
    executors: int | None = None,
    executor_memory: str = "512m",
    timeout_s: float = 180.0,
) -> Any:
    """A SparkSession on ``master_url`` with kafka_direct registered.

    Executors run this interpreter (``spark.pyspark.python``), so they import the kafka_direct
    installed here. With ``executors``, waits until that many have registered, so the first job
    is spread over all of them instead of landing on whichever came up first.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    import kafka_direct

    active = SparkContext._active_spark_context
    if active is not None and active.master != master_url:
        raise EmbeddedBrokerError(
            f"This process already runs a SparkContext on '{active.master}', and Spark allows "
            f"one per process. Stop it first, or run the driver for {master_url} in a subprocess."
        )
    host = master_url.removeprefix("spark://").rsplit(":", 1)[0]
    builder = (
        SparkSession.builder.master(master_url)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Executors connect back to the driver: keep every address on the cluster's loopback.
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", host)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.executor.memory", executor_memory)
        # Test JVMs start faster (docs/performance.md); conf may override these, e.g.
        # to measure performance with the C2 compiler.
        .config("spark.driver.extraJavaOptions", _FAST_START_JVM)
        .config("spark.executor.extraJavaOptions", _FAST_START_JVM)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_direct.register(spark)
    if executors:
        wait_for_executors(spark, executors, timeout_s)
    return spark


def wait_for_executors(spark: Any, count: int, timeout_s: float = 180.0) -> None:
    """Wait until ``count`` executors (the driver not counted) are registered with ``spark``.
    Each is a JVM its worker starts: as slow to come up as the workers on a busy machine, so
    the default is :class:`StandaloneCluster`'s start-up time."""
    deadline = time.monotonic() + timeout_s
    while True:
        # getExecutorMemoryStatus lists the driver's block manager too.
        registered = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        if registered >= count:
            return
        if time.monotonic() >= deadline:
            raise EmbeddedBrokerError(
                f"Only {registered} of {count} executors registered within {timeout_s:g} s. "
                "Check that the workers are alive and have free cores and memory."
            )
        time.sleep(_POLL_INTERVAL_S)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on ``host``, all on free ports.

    Nothing starts in ``__init__``. :meth:`start` returns once the master is up and every worker
    has registered. Logs, local and work directories are under a temporary directory that
    :meth:`stop` removes; :meth:`stop` also runs at interpreter exit.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        daemon_memory: str = "256m",
        host: str = "127.0.0.1",
        worker_hosts: Sequence[str] | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"A standalone cluster needs at least one worker, got {workers}.")
        if worker_hosts is not None and len(worker_hosts) != workers:
            raise ValueError(
                f"worker_hosts names {len(worker_hosts)} host(s) for {workers} workers: "
                "give one per worker."
            )
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.daemon_memory = daemon_memory
        self.host = host
        #: Each worker's address (and so its executor's host); by default all on ``host``.
        #: Spark never runs a speculative copy on the host of the attempt it copies, so
        #: speculation needs workers on distinct loopback addresses (127.0.0.2, ...).
        self.worker_hosts = list(worker_hosts) if worker_hosts else [host] * workers
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self.web_ui_port: int | None = None
        self._dir: Path | None = None
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self._killed: set[int] = set()
        self._sessions: list[Any] = []

    @property
    def master_url(self) -> str:
        if self._master is None or self.port is None:
            raise EmbeddedBrokerError("The standalone cluster is not started: call start().")
        return f"spark://{self.host}:{self.port}"

    @property
    def web_ui_url(self) -> str:
        return f"http://{self.host}:{self.web_ui_port}"

    @property
    def log_dir(self) -> Path | None:
        return None if self._dir is None else self._dir / "logs"

    @property
    def worker_pids(self) -> list[int]:
        """The worker daemons' pids (their executors are their children)."""
        return [proc.pid for proc in self._workers]

    def start(self) -> StandaloneCluster:
        if self._dir is not None:
            raise EmbeddedBrokerError(f"{self!r} was already started; create a new cluster.")
        started = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-direct-spark-"))
        for sub in ("logs", "conf", "local"):
            (self._dir / sub).mkdir()
        atexit.register(self.stop)
        try:
            self._start_master()
            self._workers = [
                self._launch(
                    _WORKER_CLASS, f"worker-{i}", self._worker_args(i), self.worker_hosts[i]
                )
                for i in range(self.workers)
            ]
            self._wait(
                lambda s: self._alive(s) == self.workers,
                f"{self.workers} workers",
                [f"worker-{i}" for i in range(self.workers)],
            )
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Spark standalone cluster at %s with %d workers, ready in %.1f s (logs %s)",
            self.master_url,
            self.workers,
            time.monotonic() - started,
            self.log_dir,
        )
        return self

    def _environment(self, host: str | None = None) -> dict[str, str]:
        import pyspark

        assert self._dir is not None
        return {
            **os.environ,
            "SPARK_HOME": os.path.dirname(os.path.abspath(pyspark.__file__)),
            # An empty conf dir: the user's spark-defaults.conf must not change the test cluster.
            "SPARK_CONF_DIR": str(self._dir / "conf"),
            "SPARK_LOCAL_IP": host or self.host,
            "SPARK_LOCAL_DIRS": str(self._dir / "local"),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": _FAST_START_JVM,
            # Fail instead of moving to the next port, so master_url stays right; the REST
            # submission server would take the fixed port 6066 and clash with other clusters.
            "SPARK_MASTER_OPTS": "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false",
            "PYSPARK_PYTHON": sys.executable,
        }

    def _worker_args(self, index: int) -> list[str]:
        assert self._dir is not None
        work_dir = self._dir / f"work-{index}"
        work_dir.mkdir(exist_ok=True)
        return [
            "--host",
            self.worker_hosts[index],
            "--webui-port",
            "0",  # 0: any free port; the tests never open a worker's UI
            "--cores",
            str(self.cores_per_worker),
            "--memory",
            self.memory_per_worker,
            "--work-dir",
            str(work_dir),
            self.master_url,
        ]

    def _launch(
        self, main_class: str, name: str, args: list[str], host: str | None = None
    ) -> subprocess.Popen[bytes]:
        assert self._dir is not None
        env = self._environment(host)
        spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
        with open(self._dir / "logs" / f"{name}.log", "ab") as log:
            # A process group per daemon: kill_worker() takes the worker's executor with it, and
            # a Ctrl-C in the user's terminal does not reach the daemons before stop() does.
            return subprocess.Popen(
                [spark_class, main_class, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _start_master(self) -> None:
        for attempt in range(1, _MASTER_ATTEMPTS + 1):
            self.port, self.web_ui_port = free_port(self.host), free_port(self.host)
            self._master = self._launch(
                _MASTER_CLASS,
                "master",
                [
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.web_ui_port),
                ],
            )
            try:
                self._wait(lambda s: s.get("status") == "ALIVE", "the master")
                return
            except EmbeddedBrokerError:
                # Only a port taken between free_port() and the bind is worth another try.
                if self._master.poll() is None or attempt == _MASTER_ATTEMPTS:
                    raise
                logger.info("Spark master lost a port to another process; retrying")

    def status(self) -> dict[str, Any]:
        """The master's status page as JSON (workers, their states, applications)."""
        with urllib.request.urlopen(f"{self.web_ui_url}/json/", timeout=5) as response:
            return dict(json.load(response))

    @staticmethod
    def _alive(status: Mapping[str, Any]) -> int:
        return sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE")

    def alive_workers(self) -> int:
        """How many workers the master counts as alive."""
        return self._alive(self.status())

    def _wait(self, ready: Any, what: str, logs: Sequence[str] = ("master",)) -> None:
        """Poll the master until ``ready``; a daemon that exits fails at once. Only a slow start
        (JVMs on a machine whose cores other tests keep busy) runs into
        ``startup_timeout_s``; its error shows the tails of ``logs``."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            for proc, name in self._daemons(live_only=True):
                if proc.poll() is not None:
                    raise self._error(f"The Spark {name} exited with code {proc.returncode}", name)
            with contextlib.suppress(OSError, ValueError):
                if ready(self.status()):
                    return
            time.sleep(_POLL_INTERVAL_S)
        raise self._error(f"Timed out after {self.startup_timeout_s:g} s waiting for {what}", *logs)

    def _daemons(self, live_only: bool = False) -> list[tuple[subprocess.Popen[bytes], str]]:
        """The master and the workers; with ``live_only``, not those kill_worker() killed."""
        master = [(self._master, "master")] if self._master is not None else []
        return master + [
            (proc, f"worker-{i}")
            for i, proc in enumerate(self._workers)
            if not (live_only and i in self._killed)
        ]

    def _error(self, what: str, *names: str) -> EmbeddedBrokerError:
        lines = 20 if len(names) == 1 else 8
        tails = "\n".join(
            f"Last lines of {name}.log:\n{self.log_tail(name, lines)}" for name in names
        )
        return EmbeddedBrokerError(f"{what} (cluster spark://{self.host}:{self.port}). {tails}")

    def log_tail(self, name: str = "master", lines: int = 20) -> str:
        """The last lines of a daemon's log: ``master`` or ``worker-<i>``."""
        path = None if self.log_dir is None else self.log_dir / f"{name}.log"
        if path is None or not path.exists():
            return "<no log>"
        text = path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "<empty log>"

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executor and Python workers; wait for the master.

        Returns once the master no longer counts the worker as alive (it notices the lost
        connection at once, without waiting for ``spark.worker.timeout``).
        """
        proc = self._workers[index]
        if proc.poll() is not None:
            raise EmbeddedBrokerError(f"Spark worker-{index} is not running.")
        alive = self.alive_workers()
        self._killed.add(index)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self._wait(lambda s: self._alive(s) == alive - 1, f"the master to drop worker-{index}")

    def session(self, app_name: str = "kafka_direct", conf: Mapping[str, str] | None = None) -> Any:
        """A SparkSession on this cluster with kafka_direct registered and every executor up.

        :meth:`stop` stops it before the daemons.
        """
        spark = standalone_session(
            self.master_url,
            app_name,
            {
                "spark.sql.shuffle.partitions": str(self.workers * self.cores_per_worker),
                **(conf or {}),
            },
            executors=self.alive_workers(),
            timeout_s=self.startup_timeout_s,
        )
        self._sessions.append(spark)
        return spark

    def stop(self) -> None:
        """Stop the sessions made by :meth:`session`, kill every daemon, remove the files."""
        atexit.unregister(self.stop)
        for spark in self._sessions:
            with contextlib.suppress(Exception):  # a session that failed must not keep daemons
                spark.stop()
        self._sessions.clear()
        # Workers first, so none re-registers with a master that is going away.
        for proc, _name in reversed(self._daemons()):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._master, self._workers = None, []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._master is not None else "not running"
        return f"StandaloneCluster(spark://{self.host}:{self.port or '?'}, {state})"
