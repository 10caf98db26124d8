"""The Spark driver class archive: where it lives, what a driver's options become, how a failed
build is reported. Pure: no JVM starts (subprocess.run is replaced where a build would run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kafka_direct.testing import jvm_archive
from kafka_direct.testing.jvm_archive import (
    DRIVER_OPTIONS,
    QUIET,
    ArchiveError,
    archive_path,
    build_archive,
    with_archive,
)


def _java(root: Path, name: str, libjvm: bytes) -> str:
    """A fake JDK: bin/java and lib/server/libjvm.so (what the archive's key reads)."""
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "lib" / "server" / "libjvm.so").write_bytes(libjvm)
    return str(home / "bin" / "java")


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kafka_direct" / "cds"


def test_the_archive_lives_in_the_cache_and_is_named_for_the_pyspark(
    cache: Path, tmp_path: Path
) -> None:
    import pyspark

    path = archive_path(_java(tmp_path, "jdk", b"x"))
    assert path.parent == cache
    assert path.name.startswith(f"spark-{pyspark.__version__}-") and path.suffix == ".jsa"


def test_the_same_jvm_build_has_the_same_archive(cache: Path, tmp_path: Path) -> None:
    java = _java(tmp_path, "jdk", b"x")
    assert archive_path(java) == archive_path(java)


def test_another_jdk_has_another_archive(cache: Path, tmp_path: Path) -> None:
    assert archive_path(_java(tmp_path, "jdk17", b"x")) != archive_path(
        _java(tmp_path, "jdk25", b"x")
    )


def test_an_upgraded_jvm_at_the_same_path_has_another_archive(cache: Path, tmp_path: Path) -> None:
    java = _java(tmp_path, "jdk", b"x")
    before = archive_path(java)
    (tmp_path / "jdk" / "lib" / "server" / "libjvm.so").write_bytes(b"a newer build")
    assert archive_path(java) != before


def test_without_an_archive_the_options_stay_as_they_are(cache: Path, tmp_path: Path) -> None:
    assert with_archive(DRIVER_OPTIONS, _java(tmp_path, "jdk", b"x")) == DRIVER_OPTIONS


def test_with_an_archive_a_driver_maps_it_quietly(cache: Path, tmp_path: Path) -> None:
    java = _java(tmp_path, "jdk", b"x")
    path = archive_path(java)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = with_archive(DRIVER_OPTIONS, java)
    assert options == f"{DRIVER_OPTIONS} -XX:SharedArchiveFile={path} {QUIET}"


def test_an_existing_archive_is_not_built_again(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = _java(tmp_path, "jdk", b"x")
    path = archive_path(java)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")

    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no driver should start")

    monkeypatch.setattr(subprocess, "run", must_not_run)
    assert build_archive(DRIVER_OPTIONS, java) == (path, False)


def test_a_build_asks_the_driver_to_archive_then_renames_its_file_into_place(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = _java(tmp_path, "jdk", b"x")
    seen: dict[str, str] = {}

    def driver(command: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        options = env["SPARK_SUBMIT_OPTS"]
        seen["options"] = options
        target = options.split("-XX:ArchiveClassesAtExit=", 1)[1].split()[0]
        Path(target).write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(jvm_archive.subprocess, "run", driver)
    path, made = build_archive(DRIVER_OPTIONS, java)
    assert made and path.read_bytes() == b"archive"
    assert seen["options"].startswith(DRIVER_OPTIONS + " -XX:ArchiveClassesAtExit=")


@pytest.mark.parametrize("writes_archive", [False, True])
def test_a_failed_build_says_so_with_the_drivers_last_lines(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes_archive: bool
) -> None:
    java = _java(tmp_path, "jdk", b"x")

    def driver(command: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        if writes_archive:
            target = env["SPARK_SUBMIT_OPTS"].split("-XX:ArchiveClassesAtExit=", 1)[1].split()[0]
            Path(target).write_bytes(b"half")
        return subprocess.CompletedProcess(command, 1, "", "line one\nJava gateway exited")

    monkeypatch.setattr(jvm_archive.subprocess, "run", driver)
    with pytest.raises(ArchiveError, match=r"exited with 1 (?s:.*)Java gateway exited"):
        build_archive(DRIVER_OPTIONS, java)
    assert not archive_path(java).exists()  # nothing half-made is ever used


def test_a_build_writes_its_partial_file_beside_the_archive(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rename into place must not cross file systems (/tmp may be a tmpfs).
    java = _java(tmp_path, "jdk", b"x")
    targets: list[Path] = []

    def driver(command: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        target = Path(env["SPARK_SUBMIT_OPTS"].split("-XX:ArchiveClassesAtExit=", 1)[1].split()[0])
        targets.append(target)
        target.write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(jvm_archive.subprocess, "run", driver)
    path, _ = build_archive(DRIVER_OPTIONS, java)
    assert targets[0].parent == path.parent
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _archives(directory: Path, names: list[str]) -> list[Path]:
    """Archives made one after another, the first the oldest."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for age, name in enumerate(reversed(names)):
        path = directory / name
        path.write_bytes(b"a")
        os.utime(path, (1_000_000 - age * 100, 1_000_000 - age * 100))
        paths.append(path)
    return list(reversed(paths))


@pytest.mark.parametrize(
    ("made", "keep", "limit", "left"),
    [
        pytest.param(
            ["spark-1.jsa", "spark-2.jsa"], "spark-2.jsa", 4, ["spark-1.jsa", "spark-2.jsa"],
            id="under the limit",
        ),
        pytest.param(
            ["spark-1.jsa", "spark-2.jsa", "spark-3.jsa", "spark-4.jsa", "spark-5.jsa"],
            "spark-5.jsa", 4, ["spark-2.jsa", "spark-3.jsa", "spark-4.jsa", "spark-5.jsa"],
            id="the oldest goes",
        ),
        pytest.param(
            ["spark-1.jsa", "spark-2.jsa", "spark-3.jsa"], "spark-1.jsa", 2,
            ["spark-1.jsa", "spark-3.jsa"], id="the one just made stays, however old its mtime",
        ),
        pytest.param(
            ["spark-1.jsa", "other.bin", "spark-2.jsa"], "spark-2.jsa", 1,
            ["other.bin", "spark-2.jsa"], id="only archives are removed",
        ),
    ],
)  # fmt: skip
def test_prune_keeps_the_newest_archives_and_the_one_just_made(
    tmp_path: Path, made: list[str], keep: str, limit: int, left: list[str]
) -> None:
    _archives(tmp_path / "cds", made)
    jvm_archive.prune(tmp_path / "cds", tmp_path / "cds" / keep, limit)
    assert sorted(p.name for p in (tmp_path / "cds").iterdir()) == left


def test_a_new_build_prunes_the_oldest_archives(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _archives(cache, [f"spark-0.0.{i}-old.jsa" for i in range(jvm_archive.KEEP_ARCHIVES)])
    java = _java(tmp_path, "jdk", b"x")

    def driver(command: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        target = Path(env["SPARK_SUBMIT_OPTS"].split("-XX:ArchiveClassesAtExit=", 1)[1].split()[0])
        target.write_bytes(b"archive")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(jvm_archive.subprocess, "run", driver)
    path, made = build_archive(DRIVER_OPTIONS, java)
    assert made
    assert sorted(cache.iterdir()) == sorted([path, *old[1:]])
