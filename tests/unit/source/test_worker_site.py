"""The fast worker start: which path entries ``_worker_site/sitecustomize.py`` drops, that a real
interpreter then imports PySpark from site-packages, and that anything else is left alone."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kafka_direct
from kafka_direct.source.registration import WORKER_SITE_DIR, worker_environment

SITE = Path(WORKER_SITE_DIR) / "sitecustomize.py"


def _load_site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kd_worker_site", SITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not named "sitecustomize": nothing runs at import
    return module


site = _load_site()

PKG = "/venv/site-packages/pyspark"
LIB = f"{PKG}/python/lib"


def fake_find(packages: dict[str, str]) -> Any:
    def find(name: str, _path: list[str]) -> str | None:
        return packages.get(name)

    return find


@pytest.mark.parametrize(
    ("path", "packages", "dropped"),
    [
        # pip's PySpark: its zip, py4j zip and jar repeat what site-packages holds
        (
            [
                f"{LIB}/pyspark.zip",
                f"{LIB}/py4j-0.10.9.9-src.zip",
                f"{PKG}/jars/spark-core.jar",
                "/venv/site-packages",
            ],
            {"pyspark": PKG, "py4j": "/venv/site-packages/py4j"},
            [f"{LIB}/pyspark.zip", f"{LIB}/py4j-0.10.9.9-src.zip", f"{PKG}/jars/spark-core.jar"],
        ),
        # py4j not installed on its own: its zip stays
        (
            [f"{LIB}/pyspark.zip", f"{LIB}/py4j-0.10.9.9-src.zip"],
            {"pyspark": PKG},
            [f"{LIB}/pyspark.zip"],
        ),
        # a separate SPARK_HOME: its zip may be another release, so nothing is dropped
        (
            ["/opt/spark/python/lib/pyspark.zip", "/opt/spark/jars/spark-core.jar"],
            {"pyspark": PKG, "py4j": "/venv/site-packages/py4j"},
            [],
        ),
        # no PySpark outside the archives (a cluster image without pip's PySpark)
        ([f"{LIB}/pyspark.zip"], {}, []),
        # plain directories are never touched, even inside PySpark's folder
        ([f"{LIB}", "/venv/site-packages"], {"pyspark": PKG}, []),
        # user archives elsewhere stay
        (["/home/u/deps.zip", f"{LIB}/pyspark.zip"], {"pyspark": PKG}, [f"{LIB}/pyspark.zip"]),
    ],
    ids=["pip-pyspark", "no-py4j", "other-spark-home", "no-pyspark", "dirs", "user-zip"],
)
def test_bundled_entries(path: list[str], packages: dict[str, str], dropped: list[str]) -> None:
    assert site.bundled_entries(path, fake_find(packages)) == dropped


def test_archives_are_not_searched_for_the_installed_pyspark() -> None:
    searched: list[list[str]] = []

    def find(name: str, path: list[str]) -> str | None:
        searched.append(path)
        return None

    site.bundled_entries([f"{LIB}/pyspark.zip", "/venv/site-packages"], find)
    assert searched == [["/venv/site-packages"]]


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, [WORKER_SITE_DIR]),
        ({"PYTHONPATH": "/a" + os.pathsep + "/b"}, [WORKER_SITE_DIR, "/a", "/b"]),
        ({"PYTHONPATH": WORKER_SITE_DIR + os.pathsep + "/a"}, [WORKER_SITE_DIR, "/a"]),
    ],
)
def test_worker_environment_puts_the_site_first(
    environment: dict[str, str], expected: list[str]
) -> None:
    env = worker_environment({**environment, "PYTHONHASHSEED": "0"})
    assert env["PYTHONPATH"].split(os.pathsep) == expected
    assert env["PYTHONHASHSEED"] == "0"  # the rest of Spark's environment is kept


def _pyspark_zip() -> Path:
    import pyspark

    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    assert zip_path.is_file(), "pip's PySpark ships python/lib/pyspark.zip"
    return zip_path


def _import_pyspark_with(pythonpath: list[str], cwd: Path) -> str:
    """Where a fresh interpreter imports PySpark from, with Spark's kind of PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    out = subprocess.run(
        [sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def test_a_worker_imports_pip_pyspark_from_site_packages_not_the_zip(tmp_path: Path) -> None:
    zip_path = _pyspark_zip()
    spark_path = [str(zip_path)]
    # Spark's own path: PySpark comes from the zip (this is what the site fixes)
    assert _import_pyspark_with(spark_path, tmp_path).startswith(str(zip_path))
    # with the worker site on the path: from site-packages
    imported = _import_pyspark_with([*spark_path, WORKER_SITE_DIR], tmp_path)
    assert imported == str(Path(zip_path.parent.parent.parent / "__init__.py"))


def test_a_separate_spark_home_keeps_its_zip(tmp_path: Path) -> None:
    other = tmp_path / "spark-home" / "python" / "lib"
    other.mkdir(parents=True)
    shutil.copy(_pyspark_zip(), other / "pyspark.zip")
    imported = _import_pyspark_with([str(other / "pyspark.zip"), WORKER_SITE_DIR], tmp_path)
    assert imported.startswith(str(other / "pyspark.zip"))


def test_the_environments_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(_pyspark_zip()), WORKER_SITE_DIR, str(theirs)])
    code = "import builtins, sys; print(builtins.THEIRS, sys.modules['sitecustomize'].__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["ran", str(theirs / "sitecustomize.py")]
    assert out.stderr == ""


@pytest.mark.parametrize("fast", [True, False])
def test_register_without_a_local_jvm_uses_the_public_registration(fast: bool) -> None:
    from kafka_direct.source.datasource import KafkaDirectDataSource

    registered: list[type] = []

    class FakeRegistration:
        def register(self, source: type) -> None:
            registered.append(source)

    class FakeSpark:  # like Spark Connect: no _jsparkSession
        dataSource = FakeRegistration()

    kafka_direct.register(FakeSpark(), fast_worker_start=fast)
    assert registered == [KafkaDirectDataSource]


# --- which interpreter the workers run, and what a missing kafka_direct says ----------------------


def _base_python() -> str:
    """The interpreter this virtualenv was made from: the same Python, without kafka_direct."""
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    probe = subprocess.run(
        [str(candidate), "-c", "import importlib.util as u; print(u.find_spec('kafka_direct'))"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "None", "the base interpreter has kafka_direct installed"
    return str(candidate)


def test_a_worker_without_kafka_direct_is_told_how_to_fix_it(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": WORKER_SITE_DIR,
        "KAFKA_DIRECT_DRIVER_PYTHON": "/srv/venv/bin/python",
    }
    python = _base_python()
    out = subprocess.run(
        [python, "-c", "import kafka_direct"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: kafka_direct is not installed")
    assert python in last and "(the driver runs /srv/venv/bin/python)" in last
    assert "PYSPARK_PYTHON" in last and "spark.pyspark.python" in last
    # Any other missing module is reported as Python always does.
    other = subprocess.run(
        [python, "-c", "import no_such_module_xyz"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert other.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: No module named 'no_such_module_xyz'"
    )


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str) -> str | None:
        return self.values.get(key)


class _Context:
    def __init__(self, master: str, conf: dict[str, str] | None = None) -> None:
        self.master = master
        self.pythonExec = "python3"
        self._conf = _Conf(conf or {})

    def getConf(self) -> _Conf:
        return self._conf


@pytest.mark.parametrize(
    ("master", "env", "conf", "expected"),
    [
        ("local[2]", None, {}, sys.executable),  # the driver's own: same machine
        ("local[2]", "/opt/py/bin/python", {}, "python3"),  # the user's choice stands
        ("local[2]", None, {"spark.pyspark.python": "/opt/py"}, "python3"),
        ("spark://host:7077", None, {}, "python3"),  # a cluster: executors may differ
    ],
    ids=["local", "env-set", "conf-set", "cluster"],
)
def test_worker_python(
    monkeypatch: pytest.MonkeyPatch,
    master: str,
    env: str | None,
    conf: dict[str, str],
    expected: str,
) -> None:
    from kafka_direct.source.registration import worker_python

    if env is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", env)
    assert worker_python(_Context(master, conf)) == expected


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


@pytest.mark.parametrize(
    ("before", "after"),
    [({}, "true"), ({"spark.sql.python.filterPushdown.enabled": "false"}, "false")],
    ids=["unset: turned on", "the user's choice kept"],
)
def test_register_lets_spark_offer_filters_unless_the_user_chose(
    before: dict[str, str], after: str
) -> None:
    """Spark 4.3 leaves filter pushdown into Python sources off; batch reads narrow by filters
    only with it on (see source.batch.batch_reader)."""

    class FakeRegistration:
        def register(self, source: type) -> None:
            pass

    class FakeSpark:
        dataSource = FakeRegistration()
        conf = _Conf(dict(before))

    kafka_direct.register(FakeSpark())
    assert FakeSpark.conf.values["spark.sql.python.filterPushdown.enabled"] == after
