"""Moved to :mod:`kafka_direct.source.listener`; this path keeps ``kafka_direct.listener``
working. Runs in the Spark driver (the user's process)."""

from kafka_direct.source.listener import *  # noqa: F403
from kafka_direct.source.listener import __all__  # noqa: F401
