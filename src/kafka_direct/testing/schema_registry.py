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

``SchemaRegistry(bearer=True)`` requires a bearer token on every request: Apicurio's Quarkus OIDC
verifies each token locally (RS256 signature, expiry, issuer, audience) against the public key
of a :class:`~kafka_direct.testing.tokens.TokenIssuer` made for it; ``mint_token()`` signs one.

``SchemaRegistry(client_auth=True)`` (TLS implied) requires a client certificate signed by the
registry's CA; ``client_certificate()`` issues one. Apicurio's build fixes Quarkus' client-auth
setting, so a ``socat`` front terminates TLS (see :mod:`kafka_direct.testing.tls_front`).
"""

from __future__ import annotations

import atexit
import base64
import itertools
import logging
import re
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from kafka_direct.schema_registry.errors import SchemaRegistryError
from kafka_direct.testing.apicurio_dist import APICURIO_VERSION, fetch_apicurio, find_java
from kafka_direct.testing.ports import free_port
from kafka_direct.testing.tls_front import stop_group

if TYPE_CHECKING:
    from kafka_direct.testing.certificates import CertificateAuthority
    from kafka_direct.testing.tls_front import MutualTlsFront
    from kafka_direct.testing.tokens import TokenIssuer

__all__ = ["APICURIO_VERSION", "SchemaRegistry", "fetch_apicurio", "find_java"]

logger = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.25
_LOG_TAIL_LINES = 20


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
        bearer: bool = False,
        client_auth: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.version = version
        self.startup_timeout_s = startup_timeout_s
        self.heap = heap
        self.tls = tls or client_auth
        self._users = dict(users or {})
        if bearer and self._users:
            raise SchemaRegistryError(
                "SchemaRegistry takes users (basic auth) or bearer=True (tokens), not both."
            )
        self.bearer = bearer
        self.client_auth = client_auth
        self._issuer: TokenIssuer | None = None
        self._ca: CertificateAuthority | None = None
        self._front: MutualTlsFront | None = None
        self._backend_port: int | None = None
        self._certificates = itertools.count()
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
        """TLS and authentication (:mod:`kafka_direct.testing.registry_config`), in Quarkus'
        ``config/application.properties`` of the working directory: a certificate for the host
        signed by a CA made here (``ca_location``), served by Quarkus or, with client_auth, by
        the mutual-TLS front; basic auth users; a key pair whose public key verifies tokens."""
        from kafka_direct.testing.registry_config import quarkus_security_properties

        cert = key = None
        if self.tls:
            from kafka_direct.testing.certificates import write_ca, write_server_certificate

            self._ca = write_ca(folder)
            cert, key = write_server_certificate(folder, self._ca, self.host)
            self.ca_location = str(self._ca.certificate)
        if self.client_auth:
            from kafka_direct.testing.tls_front import MutualTlsFront

            assert self._ca is not None and self.port is not None and cert and key
            self._backend_port = free_port(self.host)
            self._front = MutualTlsFront(
                self.host,
                self.port,
                self._backend_port,
                certificate=cert,
                key=key,
                client_ca=self._ca.certificate,
                log_path=folder / "tls-front.log",
            )
        if self.bearer:
            from kafka_direct.testing.tokens import TokenIssuer

            self._issuer = TokenIssuer()
        quarkus_tls = self.tls and not self.client_auth
        lines = quarkus_security_properties(
            https_port=self.port if quarkus_tls else None,
            certificate=str(cert) if quarkus_tls else None,
            key=str(key) if quarkus_tls else None,
            users=self._users,
            oidc_public_key=self._issuer.public_key_base64 if self._issuer else None,
        )
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
        self.port = self.port or free_port(self.host)
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
            # With TLS, the port is the HTTPS one (in the config file) and plain HTTP is off;
            # behind the mutual-TLS front, plain HTTP on a port of its own.
            f"-Dquarkus.http.port={self._http_port()}",
            # The management interface (health, metrics) is built in and would bind
            # 0.0.0.0:9000, which two registries (or anything else) cannot share.
            f"-Dquarkus.management.host={self.host}",
            f"-Dquarkus.management.port={free_port(self.host)}",
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
                if self._front is not None:
                    try:
                        self._front.start()
                    except SchemaRegistryError:
                        self.stop()
                        raise
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

    def _http_port(self) -> int:
        if self._backend_port is not None:
            return self._backend_port
        return 0 if self.tls else int(self.port or 0)

    def _answers(self) -> bool:
        """Whether Apicurio serves its API (behind a mutual-TLS front: on its own port)."""
        url = self.url
        if self._backend_port is not None:
            url = f"http://{self.host}:{self._backend_port}/apis/ccompat/v7"
        request = urllib.request.Request(f"{url}/subjects")
        if self._users:
            user, password = next(iter(self._users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        if self._issuer is not None:
            request.add_header("Authorization", f"Bearer {self._issuer.mint(lifetime_s=60)}")
        context = (
            ssl.create_default_context(cafile=self.ca_location)
            if url.startswith("https:")
            else None
        )
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return int(response.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def log_text(self) -> str:
        """Everything the registry's JVM has logged so far ("" once stopped)."""
        if self._dir is None:
            return ""
        try:
            return (self._dir / "registry.log").read_text(errors="replace")
        except OSError:
            return ""

    def _log_tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-_LOG_TAIL_LINES:])

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

    def mint_token(self, subject: str = "kafka-direct-test", *, lifetime_s: float = 600.0) -> str:
        """A bearer token this registry accepts (``bearer=True``): RS256-signed, with the issuer
        and audience it checks, expiring after ``lifetime_s`` seconds (negative: expired)."""
        if self._issuer is None:
            raise SchemaRegistryError(
                "mint_token() needs a registry started with SchemaRegistry(bearer=True)."
            )
        return self._issuer.mint(subject, lifetime_s=lifetime_s)

    def client_certificate(
        self, common_name: str = "kafka-direct-client", *, password: str | None = None
    ) -> tuple[str, str]:
        """A client certificate signed by this registry's CA and its key (encrypted with
        ``password`` if given), as PEM file paths in the registry's working directory."""
        if self._ca is None or self._dir is None:
            raise SchemaRegistryError(
                "client_certificate() needs a started registry with tls=True or client_auth=True."
            )
        from kafka_direct.testing.certificates import write_client_certificate

        stem = f"client-{next(self._certificates)}"
        cert, key = write_client_certificate(
            self._dir, self._ca, common_name, password=password, stem=stem
        )
        return str(cert), str(key)

    def stop(self, timeout_s: float = 10.0) -> None:
        front, self._front = self._front, None
        if front is not None:
            front.stop()
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, timeout_s)
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
        secured = (
            (", tls" if self.tls else "")
            + (", client_auth" if self.client_auth else "")
            + (", bearer" if self.bearer else "")
            + (f", users={sorted(self._users)}" if self._users else "")
        )
        return f"SchemaRegistry(apicurio={self.version}, port={self.port}{secured}, {state})"
