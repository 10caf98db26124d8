"""Sample data: the word list of the demo, the CLI's producer and the examples. Plain library."""

from __future__ import annotations

__all__ = ["WORDS"]

WORDS = [
    "kafka",
    "spark",
    "stream",
    "direct",
    "offset",
    "partition",
    "broker",
    "topic",
    "batch",
    "record",
    "driver",
    "executor",
    "commit",
    "consumer",
    "producer",
]
