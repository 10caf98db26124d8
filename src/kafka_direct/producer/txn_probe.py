"""The exactly-once sink's check that a transactional producer can start on the cluster, before
any task writes. Runs in the Spark driver, when the sink's writer is built.

A check that times out is not always hopeless. While a broker restarts, the transaction
coordinator of the check's id moves, and a query started (or restarted from its checkpoint) at
that moment must wait it out, as Spark's own connector does: the Java producer's
``initTransactions`` blocks up to ``max.block.ms`` (60 s) in its tasks. A cluster whose
transaction state log cannot be created (more replicas asked for than there are brokers) must
still fail in seconds. :func:`outlook` tells the two apart from the cluster's metadata; it is
pure, and :func:`cluster_outlook` fetches what it needs.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.authorization import DENIED_CODES, Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.logs import client_hooks

__all__ = ["WAIT_S", "cluster_outlook", "outlook", "probe_transactions"]

log = logging.getLogger(__name__)

#: How long a check that times out on a cluster able to run transactions goes on trying: the
#: Java producer's ``max.block.ms`` default, which bounds the same wait in Spark's connector.
WAIT_S = 60.0

TXN_LOG = "__transaction_state"
REPLICATION = "transaction.state.log.replication.factor"

#: (wait, why): whether waiting can help, and if not, why the cluster cannot run transactions
#: ('' when that is not known).
Outlook = tuple[bool, str]


def outlook(live_brokers: int, log_exists: bool, replication: int | None) -> Outlook:
    """Whether a transactional producer that did not start may start if the check waits.

    The transaction state log exists: its coordinators move when brokers restart, so wait. It
    does not exist yet: the first transactional producer creates it, which needs
    ``replication`` live brokers; with fewer, waiting cannot help. When the replication is not
    known (the principal may not describe the brokers' configuration), nothing says waiting
    will help, and the check fails as it did before it waited.
    """
    if log_exists:
        return True, ""
    if replication is None:
        return False, ""
    if replication > live_brokers:
        return False, (
            f"the cluster has no {TXN_LOG} topic yet, and creating it needs {replication} "
            f"brokers ({REPLICATION}={replication}) where {live_brokers} answered"
        )
    return True, ""


def cluster_outlook(admin: Any, timeout_s: float) -> Outlook:
    """:func:`outlook` for the cluster behind ``admin`` (an AdminClient); no wait when the
    cluster does not answer or hides what is needed."""
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    try:
        metadata = admin.list_topics(timeout=timeout_s)
        brokers = sorted(metadata.brokers)
        exists = TXN_LOG in metadata.topics and metadata.topics[TXN_LOG].error is None
        if exists or not brokers:
            return outlook(len(brokers), exists, None)
        resource = ConfigResource(ConfigResource.Type.BROKER, str(brokers[0]))
        configs = admin.describe_configs([resource], request_timeout=timeout_s)
        entry = configs[resource].result(timeout_s).get(REPLICATION)
        replication = int(entry.value) if entry is not None and entry.value else None
    except (KafkaException, ValueError, TypeError):
        log.debug("Could not look at the cluster's transaction state log", exc_info=True)
        return False, ""
    return outlook(len(brokers), exists, replication)


def probe_transactions(
    config: Mapping[str, str],
    prefix: str,
    timeout_s: float,
    look: Callable[[], Outlook],
    *,
    wait_s: float = WAIT_S,
    producer_factory: Callable[[dict[str, Any]], Any] = Producer,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Refuse a cluster where a transactional producer cannot start (no transactions, a
    transaction log that cannot be written, a refused timeout, ACLs), before a task writes.
    Uses an id of its own (``<prefix>-probe``), so it fences no task. A timeout on a cluster
    that ``look`` says can run transactions is tried again, up to ``wait_s`` in all."""
    txn_id = f"{prefix}-probe"
    deadline = clock() + wait_s
    attempts = 0
    while True:
        attempts += 1
        events = ClientEvents("The exactly-once sink's check")
        failed = _init_once(config, txn_id, timeout_s, events, producer_factory)
        if failed is None:
            if attempts > 1:
                log.info("The exactly-once sink's check passed at attempt %d", attempts)
            return
        kerr, exc = failed
        _refuse_at_once(kerr, config, prefix, txn_id)
        why = ""
        if _may_pass_later(kerr) and clock() < deadline:
            wait, why = look()
            if wait:
                log.warning(
                    "The exactly-once sink's check: a transactional producer did not start within "
                    "%g s (%s). The cluster can run transactions (its transaction state log "
                    "exists), so a broker restarting or a coordinator moving is waited out, up "
                    "to %g s in all.",
                    timeout_s, _said(kerr, exc), wait_s,
                )  # fmt: skip
                continue
        raise _cannot_start(config, timeout_s, kerr, exc, events.summary(), why)


def _init_once(
    config: Mapping[str, str],
    txn_id: str,
    timeout_s: float,
    events: ClientEvents,
    producer_factory: Callable[[dict[str, Any]], Any],
) -> tuple[KafkaError | None, KafkaException] | None:
    settings: dict[str, Any] = {
        **config,
        **client_hooks(events, config),
        "transactional.id": txn_id,
    }
    producer = producer_factory(settings)
    try:
        producer.init_transactions(timeout_s)
        return None
    except KafkaException as exc:
        kerr = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        return kerr, exc
    finally:
        close = getattr(producer, "close", None)
        if close is not None:
            with warnings.catch_warnings():
                # After a failed init, confluent-kafka warns that it cannot abort: nothing began.
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    close()
                except KafkaException:  # a producer with a fatal error refuses to close
                    log.debug("Closing the exactly-once check's producer failed", exc_info=True)


def _refuse_at_once(
    kerr: KafkaError | None, config: Mapping[str, str], prefix: str, txn_id: str
) -> None:
    if kerr is not None and kerr.name() in DENIED_CODES:
        access = Access(config, transactional_prefix=prefix)
        raise access.refused(
            kerr.name(),
            f"deliveryGuarantee 'exactly-once' starts a transactional producer "
            f"('{txn_id}') and nothing was written",
        ) from None


def _may_pass_later(kerr: KafkaError | None) -> bool:
    """A timeout or an error the client calls retriable; not a refused setting or a fatal one."""
    if kerr is None or kerr.fatal():
        return False
    if kerr.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        return False
    return kerr.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT) or kerr.retriable()


def _said(kerr: KafkaError | None, exc: KafkaException) -> str:
    return kerr.str() if kerr is not None else str(exc)


def _cannot_start(
    config: Mapping[str, str],
    timeout_s: float,
    kerr: KafkaError | None,
    exc: KafkaException,
    said: str,
    why: str,
) -> KafkaClientError:
    hint = (
        "Check that the brokers support transactions (Kafka >= 0.11; the embedded test "
        "broker and librdkafka's mock cluster do not implement them fully) and that their "
        "transaction state log can be written (transaction.state.log.replication.factor and "
        "transaction.state.log.min.isr no larger than the live brokers), or use "
        "deliveryGuarantee 'at-least-once'."
    )
    if kerr is not None and kerr.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        hint = (
            "Lower 'kafka.transaction.timeout.ms' to at most the brokers' "
            "transaction.max.timeout.ms."
        )
    return KafkaClientError(
        f"deliveryGuarantee 'exactly-once' needs Kafka transactions, but a transactional "
        f"producer could not start on the cluster at {config.get('bootstrap.servers')!r} "
        f"within {timeout_s:g} s: {_said(kerr, exc)}"
        + (f" (the client reported: {said})" if said else "")
        + (f"; {why}" if why else "")
        + f". {hint} Nothing was written.",
        code=kerr.name() if kerr is not None else None,
    )
