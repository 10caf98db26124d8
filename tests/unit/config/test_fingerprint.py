"""The config fingerprint that keys the pools and the sink's checks: equal for equal configs,
whatever their order, and never showing a value. Pure."""

from __future__ import annotations

import pytest

from kafka_direct.config.fingerprint import config_fingerprint

SECRET = "hunter2-very-secret"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ({"x": "1", "y": "2"}, {"y": "2", "x": "1"}, True),
        ({"x": "1"}, {"x": "2"}, False),
        ({"x": "1"}, {"x": "1", "y": "2"}, False),
        ({"sasl.password": "a"}, {"sasl.password": "b"}, False),
        ({"ab": "c"}, {"a": "bc"}, False),
        ({}, {}, True),
    ],
)
def test_config_fingerprint(a: dict[str, str], b: dict[str, str], same: bool) -> None:
    assert (config_fingerprint(a) == config_fingerprint(b)) is same


def test_config_fingerprint_hides_secrets() -> None:
    fingerprint = config_fingerprint({"bootstrap.servers": "b:9092", "sasl.password": SECRET})
    assert len(fingerprint) == 64
    int(fingerprint, 16)  # a hex digest, nothing else
    assert SECRET not in fingerprint and "sasl" not in fingerprint
