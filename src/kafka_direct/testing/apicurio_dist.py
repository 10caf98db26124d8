"""Apicurio Registry's runnable distribution and a Java to run it, for the test Schema
Registry. Plain library: the user's test process (a download once, then the cache).

The distribution (``io.apicurio:apicurio-registry-app:<version>:all@tar.gz``, a Quarkus
"fast-jar") is downloaded once from Maven Central, its SHA-1 checked against the one Maven
Central publishes, and unpacked under ``~/.cache/kafka_direct/apicurio/<version>``
(``KAFKA_DIRECT_CACHE`` moves it). Apicurio 3 is compiled for Java 21: ``find_java`` looks at
``KAFKA_DIRECT_REGISTRY_JAVA``, ``JAVA_HOME``, ``PATH`` and ``/usr/lib/jvm``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from kafka_direct.schema_registry.errors import SchemaRegistryError

__all__ = ["APICURIO_VERSION", "fetch_apicurio", "find_java"]

logger = logging.getLogger(__name__)

#: The Apicurio Registry release the tests run against.
APICURIO_VERSION = "3.3.3"
_MAVEN = "https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app"
_MIN_JAVA = 21


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
