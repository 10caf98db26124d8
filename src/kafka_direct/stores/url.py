"""An offset store named by a URL. Plain library: the user's process (the CLI) and the driver.

- ``kafka://HOST:PORT[,HOST:PORT]``: the consumer group in Kafka (``__consumer_offsets``);
- ``sqlite:///path/to/offsets.db``;
- ``postgresql://user@host:5432/db``;
- ``mysql://user[:password]@host:3306/db``.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from kafka_direct.errors import ConfigurationError
from kafka_direct.stores.base import OffsetStore

__all__ = ["open_store"]


def open_store(url: str, kafka_config: Mapping[str, str] | None = None) -> OffsetStore:
    """An :class:`OffsetStore` from a URL (see the module docstring); ``kafka_config`` adds
    client settings (security) to a ``kafka://`` store's."""
    from kafka_direct.stores.kafka_store import KafkaGroupStore
    from kafka_direct.stores.sql_store import SqlOffsetStore

    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "kafka" and parts.netloc:
        return KafkaGroupStore({**(kafka_config or {}), "bootstrap.servers": parts.netloc})
    if scheme == "sqlite" and parts.path:
        return SqlOffsetStore.sqlite(parts.path)
    if scheme in ("postgresql", "postgres"):
        return SqlOffsetStore.postgres(url)
    if scheme == "mysql" and parts.hostname and parts.path.strip("/"):
        return SqlOffsetStore.mysql(
            database=parts.path.strip("/"),
            host=parts.hostname,
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
        )
    shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}"  # never echo a password
    raise ConfigurationError(
        "--store",
        shown,
        "kafka://HOST:PORT, sqlite:///PATH, postgresql://USER@HOST/DB or mysql://USER@HOST/DB",
    )
