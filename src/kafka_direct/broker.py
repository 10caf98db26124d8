"""Moved to :mod:`kafka_direct.testing.broker`; this path keeps ``kafka_direct.broker`` and
``python -m kafka_direct.broker`` working. Plain library: the user's process."""

from kafka_direct.testing.broker import *  # noqa: F403
from kafka_direct.testing.broker import __all__, main  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())
