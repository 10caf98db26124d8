"""An offset store named by a URL. Plain library: the user's process (the CLI) and the driver.

- ``kafka://HOST:PORT[,HOST:PORT]``: the consumer group in Kafka (``__consumer_offsets``);
- ``sqlite:///path/to/offsets.db``;
- ``postgresql://user@host:5432/db``;
- ``mysql://user[:password]@host:3306/db``.

A SQL store's URL may end with ``?create_table=false``: the store then never runs DDL, for a
database user that may only read and write the offset table (see
:class:`~kafka_direct.stores.SqlOffsetStore`). A PostgreSQL URL's other parameters go to libpq.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

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
    # Never echo a password: the address without the user part.
    shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    if scheme == "kafka" and parts.netloc:
        return KafkaGroupStore({**(kafka_config or {}), "bootstrap.servers": parts.netloc})
    url, create_table = _create_table(url, shown)
    if scheme == "sqlite" and parts.path:
        return SqlOffsetStore.sqlite(parts.path, create_table=create_table)
    if scheme in ("postgresql", "postgres"):
        return SqlOffsetStore.postgres(url, create_table=create_table)
    if scheme == "mysql" and parts.hostname and parts.path.strip("/"):
        return SqlOffsetStore.mysql(
            database=parts.path.strip("/"),
            host=parts.hostname,
            port=_port(parts, shown, default=3306),
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            create_table=create_table,
        )
    raise ConfigurationError(
        "--store",
        shown,
        "kafka://HOST:PORT, sqlite:///PATH, postgresql://USER@HOST/DB or mysql://USER@HOST/DB",
    )


def _create_table(url: str, shown: str) -> tuple[str, bool]:
    """The URL without its ``create_table`` parameter, and that parameter (default true).
    The rest of the URL is kept as written: libpq reads URLs that urllib would rewrite."""
    base, _, query_text = url.partition("?")
    query = parse_qsl(query_text, keep_blank_values=True)
    values = [v.strip().lower() for k, v in query if k == "create_table"]
    if not values:
        return url, True
    if values[-1] not in ("true", "false"):
        raise ConfigurationError(
            "create_table",
            values[-1],
            "'true' or 'false'",
            f"Fix the URL's parameter, e.g. {shown}?create_table=false.",
        )
    rest = "&".join(p for p in query_text.split("&") if p.partition("=")[0] != "create_table")
    return (f"{base}?{rest}" if rest else base), values[-1] == "true"


def _port(parts: SplitResult, shown: str, *, default: int) -> int:
    """The URL's port, ``default`` when it names none."""
    try:
        port = parts.port  # ValueError for 99999 or 'abc', which the driver would get
    except ValueError as exc:
        raise _bad_port(shown, str(exc)) from exc
    if port == 0:  # 'or default' would quietly replace it
        raise _bad_port(shown, "0 is no port")
    return port or default


def _bad_port(shown: str, problem: str) -> ConfigurationError:
    return ConfigurationError(
        "--store",
        shown,
        "a port from 1 to 65535 after the host",
        f"Fix the port ({problem}), or leave it out for the database's default.",
    )
