"""A real Confluent-compatible Schema Registry on loopback, for tests. Plain library: the user's
test process, which starts and stops one JVM.

The registry is Apicurio Registry 3 (Apache-2.0), in-memory, from its runnable distribution on
Maven Central (``io.apicurio:apicurio-registry-app:<version>:all@tar.gz``, a Quarkus "fast-jar").
It serves Confluent's REST API under ``/apis/ccompat/v7``, which is what confluent-kafka's
``SchemaRegistryClient`` and kafka_direct's ``from_avro`` / ``to_avro`` talk to::

    from kafka_direct.testing import SchemaRegistry

    with SchemaRegistry() as registry:
        conf = {"url": registry.url}   # http://127.0.0.1:PORT/apis/ccompat/v7

The distribution is downloaded once, its SHA-1 checked against the one Maven Central publishes,
and unpacked under ``~/.cache/kafka_direct/apicurio/<version>`` (``KAFKA_DIRECT_CACHE`` moves
it). Apicurio 3 is compiled for Java 21, so the registry needs a Java 21 or newer: set
``KAFKA_DIRECT_REGISTRY_JAVA`` to a ``java`` binary, or one is looked for in ``JAVA_HOME`` and
``/usr/lib/jvm``. A registry that cannot start raises :class:`SchemaRegistryError` with the
last lines of its log.

``SchemaRegistry(tls=True, users={"alice": "secret"})`` serves HTTPS only (with a CA made for
it, ``ca_location``) and requires HTTP basic auth on every path, enforced by Apicurio's own
Quarkus (its embedded user realm and an "authenticated" HTTP permission), not by anything here.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from kafka_direct.schema_registry.errors import SchemaRegistryError

__all__ = ["APICURIO_VERSION", "SchemaRegistry", "fetch_apicurio", "find_java"]

logger = logging.getLogger(__name__)

#: The Apicurio Registry release the tests run against.
APICURIO_VERSION = "3.3.3"
_MAVEN = "https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app"
_MIN_JAVA = 21
_POLL_INTERVAL_S = 0.25
_LOG_TAIL_LINES = 20


def _cache_root() -> Path:
    base = os.environ.get("KAFKA_DIRECT_CACHE") or str(Path.home() / ".cache" / "kafka_direct")
    return Path(base) / "apicurio"


def _download(url: str, target: Path, timeout_s: float) -> None:
    with urllib.request.urlopen(url, timeout=timeout_s) as response, open(target, "wb") as out:
        shutil.copyfileobj(response, out, length=1 << 20)


def fetch_apicurio(version: str = APICURIO_VERSION, *, timeout_s: float = 600.0) -> Path:
    """The unpacked distribution's directory (holding ``quarkus-run.jar``), downloaded if absent."""
    home = _cache_root() / version
    if (home / "quarkus-run.jar").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    name = f"apicurio-registry-app-{version}-all.tar.gz"
    url = f"{_MAVEN}/{version}/{name}"
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=60) as response:
            expected = response.read().decode().split()[0].strip()
        with tempfile.TemporaryDirectory(dir=home.parent) as scratch:
            archive = Path(scratch) / name
            logger.info("downloading %s", url)
            _download(url, archive, timeout_s)
            sha1 = hashlib.sha1(archive.read_bytes()).hexdigest()
            if sha1 != expected:
                raise SchemaRegistryError(
                    f"The Apicurio Registry download {url} has SHA-1 {sha1}, but Maven Central "
                    f"publishes {expected}. Delete {home.parent} and try again."
                )
            unpacked = Path(scratch) / "unpacked"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            # Another process may have finished first; its copy is as good as ours.
            with contextlib.suppress(OSError):
                unpacked.rename(home)
    except (OSError, urllib.error.URLError) as exc:
        raise SchemaRegistryError(
            f"Could not download Apicurio Registry {version} from {url}: {exc}. The test "
            "registry needs Maven Central once; afterwards it runs from "
            f"{home}."
        ) from exc
    return home


def _java_major(java: str) -> int | None:
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)', result.stderr)
    return int(found.group(1)) if found else None


def find_java(minimum: int = _MIN_JAVA) -> str:
    """A ``java`` binary of at least ``minimum``: ``KAFKA_DIRECT_REGISTRY_JAVA``, then
    ``JAVA_HOME``, then ``PATH``, then the newest under ``/usr/lib/jvm``."""
    explicit = os.environ.get("KAFKA_DIRECT_REGISTRY_JAVA")
    if explicit:
        if (_java_major(explicit) or 0) < minimum:
            raise SchemaRegistryError(
                f"KAFKA_DIRECT_REGISTRY_JAVA={explicit!r} is not a Java {minimum} or newer, "
                f"which Apicurio Registry 3 needs. Point it at a newer java binary."
            )
        return explicit
    candidates: list[str] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(on_path)
    jvm_dir = Path("/usr/lib/jvm")
    if jvm_dir.is_dir():
        candidates.extend(str(p / "bin" / "java") for p in sorted(jvm_dir.iterdir(), reverse=True))
    seen: list[str] = []
    for candidate in candidates:
        if candidate in seen or not Path(candidate).is_file():
            continue
        seen.append(candidate)
        if (_java_major(candidate) or 0) >= minimum:
            return candidate
    raise SchemaRegistryError(
        f"The test Schema Registry (Apicurio Registry 3) needs Java {minimum} or newer; none "
        f"was found among {seen or 'JAVA_HOME, PATH and /usr/lib/jvm'}. Install one (for "
        f"example Debian's openjdk-{minimum}-jre-headless) or set KAFKA_DIRECT_REGISTRY_JAVA."
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class SchemaRegistry:
    """Apicurio Registry 3 with in-memory storage, started on loopback; ``url`` is its
    Confluent-compatible API. Nothing starts in ``__init__``; :meth:`start` (or ``with``) blocks
    until the registry answers, :meth:`stop` kills the JVM and removes its log directory."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        version: str = APICURIO_VERSION,
        startup_timeout_s: float = 180.0,
        heap: str = "384m",
        tls: bool = False,
        users: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.version = version
        self.startup_timeout_s = startup_timeout_s
        self.heap = heap
        self.tls = tls
        self._users = dict(users or {})
        self.startup_s: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self.ca_location: str | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL, e.g. ``http://127.0.0.1:41234/apis/ccompat/v7``
        (``https://`` with ``tls=True``)."""
        if self._process is None or self.port is None:
            raise SchemaRegistryError("The Schema Registry is not started: call start() first.")
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}/apis/ccompat/v7"

    def _secure_config(self, folder: Path) -> None:
        """TLS and basic auth, in Quarkus' ``config/application.properties`` of the working
        directory (so that no password is on the JVM's command line): a certificate for the
        host signed by a CA made here (``ca_location``), HTTP off; users in Quarkus' embedded
        realm, every path for authenticated users only."""
        lines: list[str] = []
        if self.tls:
            from kafka_direct.testing.certificates import write_ca_and_server_certificate

            ca, cert, key = write_ca_and_server_certificate(folder, self.host)
            self.ca_location = str(ca)
            lines += [
                f"quarkus.http.ssl-port={self.port}",
                "quarkus.http.insecure-requests=disabled",
                f"quarkus.http.ssl.certificate.files={cert}",
                f"quarkus.http.ssl.certificate.key-files={key}",
            ]
        if self._users:
            lines += [
                # Logged at start as "build time fixed", yet read: without it, nothing
                # authenticates and every request is refused with 401.
                "quarkus.http.auth.basic=true",
                "quarkus.security.users.embedded.enabled=true",
                "quarkus.security.users.embedded.plain-text=true",
                "quarkus.http.auth.permission.everything.paths=/*",
                "quarkus.http.auth.permission.everything.policy=authenticated",
            ]
            for user, password in self._users.items():
                lines.append(f"quarkus.security.users.embedded.users.{user}={password}")
        if lines:
            (folder / "config").mkdir()
            (folder / "config" / "application.properties").write_text("\n".join(lines) + "\n")

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> SchemaRegistry:
        if self._process is not None:
            raise SchemaRegistryError(f"{self!r} is already started.")
        home = fetch_apicurio(self.version)
        java = find_java()
        self.port = self.port or _free_port(self.host)
        self._dir = Path(tempfile.mkdtemp(prefix="kafka-direct-registry-"))
        self._secure_config(self._dir)
        command = [
            java,
            f"-Xmx{self.heap}",
            # A short-lived test server: the quick JIT tier and one GC thread start it sooner
            # on a busy machine.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Dquarkus.http.host={self.host}",
            # With TLS, the port is the HTTPS one (in the config file) and plain HTTP is off.
            f"-Dquarkus.http.port={0 if self.tls else self.port}",
            # The management interface (health, metrics) is built in and would bind
            # 0.0.0.0:9000, which two registries (or anything else) cannot share.
            f"-Dquarkus.management.host={self.host}",
            f"-Dquarkus.management.port={_free_port(self.host)}",
            "-Dquarkus.log.level=WARN",
            "-Dquarkus.http.access-log.enabled=false",
            "-jar",
            str(home / "quarkus-run.jar"),
        ]
        log_path = self._dir / "registry.log"
        began = time.monotonic()
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                cwd=self._dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        deadline = began + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                tail = self._log_tail()
                self.stop()
                raise SchemaRegistryError(
                    f"Apicurio Registry {self.version} exited with code {code} while "
                    f"starting. Its log ends with:\n{tail}"
                )
            if self._answers():
                self.startup_s = time.monotonic() - began
                logger.info("Schema Registry ready at %s in %.1fs", self.url, self.startup_s)
                return self
            time.sleep(_POLL_INTERVAL_S)
        tail = self._log_tail()
        self.stop()
        raise SchemaRegistryError(
            f"Apicurio Registry {self.version} did not answer on port {self.port} within "
            f"{self.startup_timeout_s:.0f}s. Its log ends with:\n{tail}"
        )

    def _answers(self) -> bool:
        request = urllib.request.Request(f"{self.url}/subjects")
        if self._users:
            user, password = next(iter(self._users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=self.ca_location) if self.tls else None
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return int(response.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def _log_tail(self) -> str:
        if self._dir is None:
            return ""
        try:
            lines = (self._dir / "registry.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def rss_bytes(self) -> int | None:
        """The JVM's resident memory, from /proc (Linux only)."""
        if self._process is None:
            return None
        try:
            status = Path(f"/proc/{self._process.pid}/status").read_text()
        except OSError:
            return None
        found = re.search(r"VmRSS:\s+(\d+) kB", status)
        return int(found.group(1)) * 1024 if found else None

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout_s)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self._process is not None else "stopped"
        secured = (", tls" if self.tls else "") + (
            f", users={sorted(self._users)}" if self._users else ""
        )
        return f"SchemaRegistry(apicurio={self.version}, port={self.port}{secured}, {state})"
