"""Before a query starts: may its principal do what the query will do? Runs in the Spark driver
(the source's planner, the sink's check, the DStream and receiver streams) and the user's process
(the CLI).

Kafka tells a principal what it may do with a resource it may see (``DescribeTopics``,
``DescribeGroups`` and ``DescribeCluster`` with ``include_authorized_operations``), and answers
``*_AUTHORIZATION_FAILED`` for one it may not see at all. Both become a
:class:`~kafka_direct.errors.NotAuthorizedError` that names the principal, the operation, the
resource and the grant, before any task runs, instead of a task failing mid-way, a topic said
not to exist, or commits that silently never land.

Only clients that authenticate (``security.protocol`` other than ``PLAINTEXT``) are checked: a
PLAINTEXT client is ``User:ANONYMOUS``, whom clusters with ACLs rarely let in at all, and the
check would cost every unsecured query a request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from kafka_direct.kafka.authorization import missing_operations, not_authorized

__all__ = ["authenticates", "check_group", "check_topics"]

log = logging.getLogger(__name__)


def authenticates(config: Mapping[str, str]) -> bool:
    """True when the client authenticates (SASL or TLS): the checks apply."""
    return config.get("security.protocol", "plaintext").lower() != "plaintext"


def _names(ops: Any) -> list[str] | None:
    return None if ops is None else [getattr(op, "name", str(op)) for op in ops]


def _code(exc: BaseException) -> str | None:
    kerr = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return kerr.name() if isinstance(kerr, KafkaError) else None


def check_topics(
    admin: Any,
    config: Mapping[str, str],
    topics: Sequence[str],
    operations: str,
    *,
    what: str | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Raise :class:`NotAuthorizedError` if the principal may not do ``operations`` (``"READ"``,
    ``"WRITE"``) on every one of ``topics``; return the topics Kafka says do not exist.

    A topic the principal may not DESCRIBE is answered with TOPIC_AUTHORIZATION_FAILED whether
    it exists or not (Kafka does not tell who may not see it): the error says both causes.
    ``what`` says why the query needs the right."""
    if not topics or not authenticates(config):
        return []
    wanted = list(dict.fromkeys(topics))
    futures = admin.describe_topics(
        TopicCollection(wanted), request_timeout=timeout_s, include_authorized_operations=True
    )
    hidden: list[str] = []
    absent: list[str] = []
    short: dict[str, list[str]] = {}
    for topic, future in futures.items():
        try:
            found = future.result(timeout=timeout_s + 5)
        except (KafkaException, FutureTimeout) as exc:
            code = _code(exc)
            if code == "TOPIC_AUTHORIZATION_FAILED":
                hidden.append(topic)
            elif code in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"):
                absent.append(topic)
            else:  # not an answer about rights: the caller's own request will say more
                log.info("Could not check the rights on topic %s: %s", topic, exc)
            continue
        missing = missing_operations(_names(found.authorized_operations), operations.split())
        if missing:
            short[topic] = missing
    if hidden:
        raise not_authorized(
            config, f"DESCRIBE {operations}", "topic", sorted(hidden), context=what
        )
    if short:
        ops = sorted({op for missing in short.values() for op in missing})
        raise not_authorized(config, " ".join(ops), "topic", sorted(short), context=what)
    return absent


def check_group(
    admin: Any,
    config: Mapping[str, str],
    group: str,
    *,
    what: str,
    timeout_s: float = 30.0,
) -> None:
    """Raise :class:`NotAuthorizedError` if the principal may not READ (commit to, fetch the
    offsets of) ``group``; ``what`` says why the query needs it."""
    if not authenticates(config):
        return
    futures = admin.describe_consumer_groups(
        [group], request_timeout=timeout_s, include_authorized_operations=True
    )
    try:
        found = futures[group].result(timeout=timeout_s + 5)
    except (KafkaException, FutureTimeout) as exc:
        if _code(exc) == "GROUP_AUTHORIZATION_FAILED":
            raise not_authorized(config, "READ", "group", [group], context=what) from None
        log.info("Could not check the rights on group %s: %s", group, exc)
        return
    if missing_operations(_names(found.authorized_operations), ["READ"]):
        raise not_authorized(config, "READ", "group", [group], context=what)
