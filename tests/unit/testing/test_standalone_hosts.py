"""StandaloneCluster without starting anything: one host per worker, by default the cluster's
own; a start that times out names the logs of the daemons it waited for."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kafka_direct.errors import EmbeddedBrokerError
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


def test_a_start_that_times_out_shows_the_logs_of_the_daemons_it_waited_for(
    tmp_path: Path,
) -> None:
    # No daemon runs: the master's status page refuses every poll until the deadline.
    cluster = StandaloneCluster(workers=2, startup_timeout_s=0.3)
    cluster._dir = tmp_path
    (tmp_path / "logs").mkdir()
    for i in range(2):
        (tmp_path / "logs" / f"worker-{i}.log").write_text(f"boot\nworker {i} still loading\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        cluster.web_ui_port = sock.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(EmbeddedBrokerError) as raised:
            cluster._wait(lambda status: True, "2 workers", ["worker-0", "worker-1"])
    message = str(raised.value)
    assert message.startswith("Timed out after 0.3 s waiting for 2 workers")
    assert "Last lines of worker-0.log:\nboot\nworker 0 still loading" in message
    assert "Last lines of worker-1.log:\nboot\nworker 1 still loading" in message
    assert "master.log" not in message
