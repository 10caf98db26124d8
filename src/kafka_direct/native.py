"""Moved to :mod:`kafka_direct.consumer.native`; this path keeps ``kafka_direct.native.status()``
working. Plain library (the C fast path runs in Spark executors)."""

from kafka_direct.consumer.native import *  # noqa: F403
from kafka_direct.consumer.native import __all__  # noqa: F401
