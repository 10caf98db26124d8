"""One exactly-once write task: its records and its marker in one Kafka transaction, committed by
the task itself. Runs in Spark executors (Python workers); the driver's check that such a
producer can start at all is :mod:`~kafka_direct.producer.txn_probe`.

Why the task commits: a Kafka transaction can only be committed by the producer that began it,
unless client and broker support KIP-939's two-phase commit (``prepare``, then a commit by
another process). librdkafka 2.16 has no part of KIP-939, so the driver's ``commit()`` cannot
finish what the tasks began. Each task therefore commits its own transaction, and a task whose
work must not happen twice recognises it from the marker committed with it
(:mod:`~kafka_direct.producer.markers`):

1. The task's first non-empty Arrow batch is awaited: an empty task opens nothing.
2. A new producer with the task's transactional id calls ``init_transactions``. The coordinator
   fences every older producer of the id (an earlier attempt still running, a speculative copy,
   a task of a run before a driver crash: their commit fails with ``_FENCED``) and finishes the
   id's open transaction: a commit already asked for completes, anything else is aborted.
3. The marker is read back (read_committed, so only what committed counts;
   :mod:`~kafka_direct.producer.marker_reads`) and
   :func:`~kafka_direct.producer.markers.decide` says whether to write or skip. A skipping task
   reads its rows all the same: their count and digest must be the committed ones
   (:func:`~kafka_direct.producer.markers.check_replay`). With no marker on the marker topic,
   the group's markers on other topics are looked at: one there for this work (the marker
   topic changed while it was unfinished) is skipped on the same way
   (:func:`~kafka_direct.producer.markers.committed_elsewhere`).
4. Writing: ``begin_transaction``, every record, ``flush`` (a failed delivery fails the task
   with its topic and partition, as at-least-once does), the marker (count and digest of the
   rows, :mod:`~kafka_direct.producer.digest`) through
   ``send_offsets_to_transaction``, ``commit_transaction``. Any failure aborts the transaction
   and fails the task; Spark's retry starts again at 2.

A producer serves one task and is closed after it, never pooled: ``init_transactions`` can run
once per producer, and a pooled producer could hold an epoch that another worker's producer of
the same id has fenced since (a task would fail for it). Writes go through the Python producer:
the C fast path has no transactional calls.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_direct.config.clients import int_setting
from kafka_direct.errors import KafkaClientError
from kafka_direct.kafka.authorization import Access
from kafka_direct.kafka.events import ClientEvents
from kafka_direct.kafka.translate import translate
from kafka_direct.producer.batch_producer import PythonBatchProducer
from kafka_direct.producer.digest import (
    XXH3_SCHEME,
    RowCount,
    RowDigest,
    computable,
    scheme_of,
)
from kafka_direct.producer.marker_reads import markers_elsewhere, new_marker_reader, read_marker
from kafka_direct.producer.markers import (
    Decision,
    Marker,
    TaskIdentity,
    check_replay,
    committed_elsewhere,
    decide,
    transactional_id,
)
from kafka_direct.producer.write import WriteResult, WriteSettings, record_stats

__all__ = ["TRANSACTIONAL", "TransactionalProducer", "write_transaction"]

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSACTIONAL = "python-transactional"

#: librdkafka's default transaction.timeout.ms (the sink sets its own: config.clients).
_LIBRDKAFKA_TRANSACTION_TIMEOUT_MS = 60_000


class TransactionalProducer(PythonBatchProducer):
    """The Python batch producer with Kafka's transactional calls, errors translated.
    ``clock`` (seconds, monotonic) times the open transaction: tests pass a fake one."""

    def __init__(
        self, config: Mapping[str, str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(config)
        self.transactional_id = config["transactional.id"]
        self.transaction_timeout_ms = int_setting(
            config.get("transaction.timeout.ms"), _LIBRDKAFKA_TRANSACTION_TIMEOUT_MS
        )
        self._clock = clock
        #: When the open transaction began (``clock``), else None.
        self._began: float | None = None
        #: An abort that did not finish: the transaction's outcome lies with the coordinator.
        self._unsettled = False

    def _txn(self, what: str, fn: Callable[..., T], *args: Any, access: Access | None = None) -> T:
        try:
            return fn(*args)
        except KafkaException as exc:
            self.check()  # a failed delivery explains a failed commit better
            access = access or self._latch.access
            raise _txn_error(
                exc, what, self.transactional_id, access, self.fenced_reason()
            ) from None

    def fenced_reason(self) -> str:
        """Why librdkafka says this producer is fenced, as a clause for the error. Two causes
        give the same error: a newer producer of the id (a newer attempt or run), or the
        coordinator aborting a transaction older than ``transaction.timeout.ms``, which bumps
        the id's epoch as a new producer would. The second is said when the transaction was
        open that long: raising the timeout is then the fix, not looking for another attempt."""
        open_s = None if self._began is None else self._clock() - self._began
        if open_s is None or open_s * 1000 <= self.transaction_timeout_ms:
            return _TOOK_OVER
        return (
            f": its transaction had been open for {open_s:.1f} s, longer than "
            f"kafka.transaction.timeout.ms={self.transaction_timeout_ms}, so the transaction "
            "coordinator aborted it (it bumps the producer's epoch, which librdkafka reports "
            "as fenced). Raise kafka.transaction.timeout.ms (up to the brokers' "
            "transaction.max.timeout.ms, 15 minutes by default) or give each task less to "
            "write (a lower maxOffsetsPerTrigger on a Kafka source)"
        )

    def init_transactions(self, timeout_s: float, topic: str | None = None) -> None:
        """``init_transactions``, after a metadata answer for ``topic`` when given.

        Why the metadata first: a new producer learns the brokers from its bootstrap connection
        and then drops that connection. ``init_transactions`` asks for the transaction
        coordinator at once, and librdkafka 2.16 sends that request on the bootstrap connection
        if it is still up; when the connection is dropped under the request, librdkafka asks
        again only on its coordinator timer, 500 ms later. Most of a small task's time was that
        wait (benchmarks/first_contact.py). Once a metadata answer is in, the bootstrap
        connection is gone; the first answer may come from it, before any connection to a broker
        by its id is up (the request then finds none and waits for the timer too). The second
        request goes to a broker by its id, so once it is answered that connection is up.
        """
        if topic is not None:
            for _ in range(2):
                self._txn("reading metadata", self._producer.list_topics, topic, timeout_s)
        self._txn("initialising", self._producer.init_transactions, timeout_s)

    def begin_transaction(self) -> None:
        self._txn("beginning a transaction", self._producer.begin_transaction)
        self._began = self._clock()

    def send_marker(self, marker: Marker, topic: str, group: Any, timeout_s: float) -> None:
        offsets = [TopicPartition(topic, 0, marker.offset(), marker.encode())]
        # Kafka checks a marker like a consumer's commit: READ on the topic and on the group
        # (named like the transactional id).
        base = self._latch.access
        access = (
            None
            if base is None
            else replace(base, topics=[topic], topic_operations="READ", group=self.transactional_id)
        )
        self._txn(
            "adding the task's marker to the transaction",
            self._producer.send_offsets_to_transaction, offsets, group, timeout_s,
            access=access,
        )  # fmt: skip

    def commit_transaction(self, timeout_s: float) -> None:
        """Commit; a retriable error (a commit whose outcome is unknown) is retried until
        ``timeout_s``, as librdkafka allows."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
                return
            except KafkaException as exc:
                kerr = exc.args[0] if exc.args else None
                retriable = isinstance(kerr, KafkaError) and kerr.retriable()
                if not retriable or time.monotonic() >= deadline:
                    self.check()
                    raise _txn_error(
                        exc, "committing", self.transactional_id, self._latch.access,
                        self.fenced_reason(),
                    ) from None  # fmt: skip

    def abort_transaction(self, timeout_s: float) -> None:
        """Best effort after a failure being reported. A fenced producer cannot abort, and need
        not: what fenced it (a newer producer's ``init_transactions``, or the coordinator after
        ``kafka.transaction.timeout.ms``) aborted its transaction. Any other fatal error leaves
        the producer as unable to send, so closing it waits for nothing. A producer whose abort
        failed otherwise (the coordinator unreachable) is left to :meth:`close` to drop."""
        try:
            self._producer.abort_transaction(timeout_s)
        except KafkaException as exc:
            kerr = exc.args[0] if exc.args else None
            settled = isinstance(kerr, KafkaError) and (
                # _STATE: no transaction was open (the task failed before it began one).
                kerr.code() == KafkaError._STATE or kerr.fatal() or kerr.name() in _FENCED_CODES
            )
            if not settled:
                self._unsettled = True
            elif isinstance(kerr, KafkaError) and kerr.name() in _FENCED_CODES:
                log.info(
                    "The producer of '%s' is fenced: its open transaction was aborted by what "
                    "fenced it (a newer producer of the id, or the coordinator after "
                    "kafka.transaction.timeout.ms); closing it",
                    self.transactional_id,
                )
            log.debug("Aborting the transaction of '%s' failed: %r", self.transactional_id, exc)
        finally:
            self._began = None

    def close(self) -> None:
        """As the batch producer's, but after an abort that did not finish the client is dropped
        unclosed: confluent-kafka's ``close()`` aborts again and flushes, each with no time
        limit, so a cluster gone away held the failing task until it came back (measured: as
        long as a broker stayed stopped). Dropped, the client is destroyed at once, and the
        coordinator aborts the transaction itself (the next attempt's ``init_transactions``, or
        ``kafka.transaction.timeout.ms``). A fenced producer is closed: its abort returns its
        fatal error at once, and its queue is purged first, so the flush has nothing to wait
        for."""
        self.abort()  # what is queued or in flight goes nowhere
        if not self._unsettled:
            super().close()
            return
        log.info(
            "Dropping the producer of '%s' without closing it: its transaction's abort did not "
            "finish, and the coordinator will abort it",
            self.transactional_id,
        )


_FENCED_CODES = {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}
_TOOK_OVER = (
    ": a newer attempt of this task (or a newer run of the query) took over the transactional "
    "id, so this attempt's transaction is aborted and the newer one writes"
)


def _txn_error(
    exc: KafkaException,
    what: str,
    txn_id: str,
    access: Access | None = None,
    fenced: str = _TOOK_OVER,
) -> KafkaClientError:
    """``exc`` translated; ``fenced`` says why, when the producer is fenced
    (:meth:`TransactionalProducer.fenced_reason`)."""
    kerr = exc.args[0] if exc.args else None
    context = f"The exactly-once write (transactional id '{txn_id}') failed while {what}"
    if isinstance(kerr, KafkaError) and kerr.name() in _FENCED_CODES:
        context += fenced
    elif isinstance(kerr, KafkaError) and kerr.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        context += (
            ": the brokers refuse 'kafka.transaction.timeout.ms' (it must not exceed their "
            "transaction.max.timeout.ms)"
        )
    return translate(exc, context, access=access)


class _Laps:
    """Seconds per step of a task, each step timed from the end of the one before."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = now - self._last
        self._last = now


def _first_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches from the first non-empty one on, or None when there are no rows at all."""
    it = iter(batches)
    for batch in it:
        if batch.num_rows:
            return itertools.chain([batch], it)
    return None


def _replay_digest(settings: WriteSettings, marker: Marker, txn_id: str) -> RowDigest | RowCount:
    """What a replayed task computes to check its rows against ``marker``: a digest of the
    marker's scheme; the count only when the marker has no digest, the query checks counts only,
    or this Python worker cannot compute the marker's scheme (said in a warning)."""
    scheme = scheme_of(marker.digest)
    assert settings.transactions is not None
    if not settings.transactions.check_rows or scheme is None:
        return RowCount()
    if not computable(scheme):
        why = (
            "it needs kafka_direct's C extension _row_digest, which this installation lacks"
            if scheme == XXH3_SCHEME
            else "a newer kafka_direct wrote it"
        )
        log.warning(
            "The marker of transactional id '%s' carries a row digest of scheme '%s', which this "
            "Python worker cannot compute (%s): the replay is checked by its row count only",
            txn_id, scheme, why,
        )  # fmt: skip
        return RowCount()
    return RowDigest(settings.columns, scheme)


def write_transaction(
    settings: WriteSettings,
    batches: Iterable[pa.RecordBatch],
    task: TaskIdentity,
    *,
    attempt: int = 0,
) -> WriteResult:
    """Write ``batches`` exactly once for ``task`` (module docstring)."""
    txn = settings.transactions
    assert txn is not None, "write_transaction needs WriteSettings.transactions"
    started, started_wall = time.monotonic(), time.time()
    lap = _Laps()
    rows = _first_rows(batches)
    if rows is None:
        return WriteResult(0, 0, time.monotonic() - started, TRANSACTIONAL, reused=False)
    lap("first rows")
    txn_id = transactional_id(txn.prefix, task.partition)
    timeout_s = settings.flush_timeout_s
    producer = TransactionalProducer({**settings.producer_config, "transactional.id": txn_id})
    events = ClientEvents("The exactly-once sink's marker reader")
    consumer = new_marker_reader(txn.consumer_config, txn_id, events)
    lap("clients")
    records = count = 0
    try:
        # The marker topic exists (the driver checked), so its metadata creates nothing.
        producer.init_transactions(timeout_s, txn.marker_topic)
        lap("init_transactions")
        marker = read_marker(consumer, txn.marker_topic, txn_id, timeout_s)
        where = ""
        if marker is None:
            # The marker topic may have changed while this work was unfinished.
            elsewhere = markers_elsewhere(txn.consumer_config, txn_id, txn.marker_topic, timeout_s)
            found = committed_elsewhere(elsewhere, task, txn_id, attempt=attempt)
            if found is not None:
                where = (
                    f"; its marker is on topic '{found[0]}', not on the marker topic "
                    f"'{txn.marker_topic}', which changed while the work was unfinished"
                )
                marker = found[1]
        lap("marker read")
        digest: RowDigest | RowCount
        if decide(marker, task, txn_id, attempt=attempt) is Decision.SKIP:
            assert marker is not None
            digest = _replay_digest(settings, marker, txn_id)
            for batch in rows:
                digest.update(batch)
            records = digest.rows
            check_replay(marker, task, records, txn_id, digest.hexdigest())
            log.info(
                "The %s was committed by an earlier attempt (%d record(s), transactional id "
                "'%s'%s): nothing written again", task.describe(), records, txn_id, where,
            )  # fmt: skip
            return WriteResult(
                records, 0, time.monotonic() - started, TRANSACTIONAL, reused=False, skipped=True
            )
        # transactionReplayCheck=count: no digest at all (docs/performance.md has its cost);
        # the marker then carries the count only.
        digest = RowDigest(settings.columns) if txn.check_rows else RowCount()
        producer.begin_transaction()
        columns = settings.columns
        # "produce" includes waiting for the task's next input batches (its read).
        for batch in rows:
            producer.produce_batch(batch, columns)
            digest.update(batch)
            records += batch.num_rows
            count += 1
        lap("produce")
        producer.flush(timeout_s)
        lap("flush")
        done = Marker(
            records, task.batch_id, task.write_id, attempt, digest.hexdigest(),
            task.write_started_ms,
        )  # fmt: skip
        producer.send_marker(done, txn.marker_topic, consumer.consumer_group_metadata(), timeout_s)
        lap("send marker")
        producer.commit_transaction(timeout_s)
        lap("commit")
    except KafkaClientError as exc:
        # Before the abort, which ends the transaction's clock.
        fenced = producer.fenced_reason()
        producer.abort_transaction(min(timeout_s, 10.0))
        # A fenced delivery or flush: said as the transactional calls say it (_txn_error).
        if exc.code in _FENCED_CODES and f"transactional id '{txn_id}'" not in str(exc):
            raise KafkaClientError(
                f"{exc} (transactional id '{txn_id}'){fenced}", code=exc.code
            ) from None
        raise
    except BaseException:
        producer.abort_transaction(min(timeout_s, 10.0))
        raise
    finally:
        try:
            consumer.close()
        finally:
            producer.close()
    lap("close")
    result = WriteResult(
        records, count, time.monotonic() - started, TRANSACTIONAL, reused=False, phases=lap.phases
    )
    record_stats(settings, result, started_wall)
    log.info(
        "Committed %d record(s) of the %s in %.3f s (transactional id '%s')",
        records, task.describe(), result.seconds, txn_id,
    )  # fmt: skip
    return result
