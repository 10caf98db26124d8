"""A TLS front that requires client certificates (mutual TLS), for the test Schema Registry.
Plain library: the user's test process, which starts and stops one ``socat`` process.

Apicurio's published build fixes Quarkus' ``quarkus.http.ssl.client-auth`` to ``NONE`` when the
application is built (Quarkus logs "build time fixed" and ignores a runtime value), so the
registry itself cannot be told to ask for client certificates. Deployments that need mutual TLS
put a terminating proxy in front of it; so do the tests, with ``socat`` (OpenSSL): it accepts
only clients whose certificate a given CA signed, and forwards the decrypted bytes to the
registry's plain HTTP port on loopback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from kafka_direct.schema_registry.errors import SchemaRegistryError

__all__ = ["MutualTlsFront", "socat_listen_address", "stop_group"]

_POLL_INTERVAL_S = 0.1


def socat_listen_address(
    host: str, port: int, certificate: Path, key: Path, client_ca: Path
) -> str:
    """socat's ``OPENSSL-LISTEN`` address: the server's certificate and key, and ``verify=1``
    with ``cafile``, so a client without a certificate signed by ``client_ca`` is refused during
    the handshake; ``fork`` serves each connection in a child."""
    return (
        f"OPENSSL-LISTEN:{port},bind={host},reuseaddr,fork,cert={certificate},key={key},"
        f"cafile={client_ca},verify=1"
    )


class MutualTlsFront:
    """``socat`` on ``host:port`` (TLS, client certificate required) → ``host:target_port``."""

    def __init__(
        self,
        host: str,
        port: int,
        target_port: int,
        *,
        certificate: Path,
        key: Path,
        client_ca: Path,
        log_path: Path,
    ) -> None:
        self.host = host
        self.port = port
        self.target_port = target_port
        self._listen = socat_listen_address(host, port, certificate, key, client_ca)
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        socat = shutil.which("socat")
        if socat is None:
            raise SchemaRegistryError(
                "SchemaRegistry(client_auth=True) needs the 'socat' program as its mutual-TLS "
                "front, and it is not on PATH. Install it (Debian: apt-get install socat)."
            )
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                [socat, self._listen, f"TCP:{self.host}:{self.target_port}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SchemaRegistryError(
                    f"The mutual-TLS front (socat) exited with code {self._process.returncode}; "
                    f"see {self._log_path}."
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=1),
            ):
                return
            time.sleep(_POLL_INTERVAL_S)
        self.stop()
        raise SchemaRegistryError(
            f"The mutual-TLS front (socat) did not listen on {self.host}:{self.port} within "
            f"{timeout_s:.0f}s."
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stops socat and the children it forked for open connections (its process group)."""
        process, self._process = self._process, None
        if process is not None:
            stop_group(process, timeout_s)


def stop_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM to the process group a child leads, SIGKILL if it outlives ``timeout_s``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout_s)
