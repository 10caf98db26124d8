"""Moved to :mod:`kafka_direct.testing.local`; this path keeps ``kafka_direct.local`` working.
Runs in the user's process (the Spark driver)."""

from kafka_direct.testing.local import *  # noqa: F403
from kafka_direct.testing.local import __all__  # noqa: F401
