"""The fingerprint of a client configuration. Pure: plain library.

Pools key their clients by configuration (:mod:`kafka_direct.executor.lease_pool`), and the sink
remembers which configurations it has checked (:mod:`kafka_direct.source.sink`). A fingerprint
tells configurations apart without holding, or printing, their values, which may be secrets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

__all__ = ["config_fingerprint"]


def config_fingerprint(config: Mapping[str, str]) -> str:
    """A stable hex digest of ``config``: equal for equal configurations, whatever their order."""
    canonical = json.dumps(sorted(config.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
