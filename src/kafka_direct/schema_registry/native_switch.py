"""Whether a codec's C extension is in use, and why not: one rule for the Avro decoder, the
Avro encoder and the Protobuf decoder. Pure: plain library, used in the Spark driver and the
Python workers.

An extension is used when it was compiled at install (and imported) and its environment
variable is not ``0`` in the process's environment (for Spark, the Python workers').
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["native_on", "native_status"]


def native_on(extension: Any, disable_env: str) -> bool:
    """Whether ``extension`` (None when it did not import) is to be used."""
    return extension is not None and os.environ.get(disable_env, "1") != "0"


def native_status(
    extension: Any, import_error: str | None, disable_env: str, fallback: str, what: str
) -> str:
    """ "C ``what`` (the extension's module)" when it is used, else ``fallback`` and why not."""
    if extension is None:
        return f"{fallback}: the C {what} is not available ({import_error})"
    if os.environ.get(disable_env, "1") == "0":
        return f"{fallback}: {disable_env}=0"
    return f"C {what} ({extension.__name__})"
