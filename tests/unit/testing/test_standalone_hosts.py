"""StandaloneCluster's worker hosts, without starting anything: one host per worker, by default
the cluster's own."""

from __future__ import annotations

import pytest

from kafka_direct.testing import StandaloneCluster


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"workers": 2}, ["127.0.0.1", "127.0.0.1"], id="default: all on host"),
        pytest.param({"workers": 1, "host": "127.0.0.3"}, ["127.0.0.3"], id="another host"),
        pytest.param(
            {"workers": 2, "worker_hosts": ("127.0.0.1", "127.0.0.2")},
            ["127.0.0.1", "127.0.0.2"],
            id="one host each",
        ),
    ],
)
def test_worker_hosts(kwargs: dict[str, object], expected: list[str]) -> None:
    assert StandaloneCluster(**kwargs).worker_hosts == expected  # type: ignore[arg-type]


def test_a_host_per_worker_is_required() -> None:
    with pytest.raises(ValueError, match="names 1 host\\(s\\) for 2 workers"):
        StandaloneCluster(workers=2, worker_hosts=("127.0.0.2",))
