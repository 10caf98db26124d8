"""The Kafka sink's write task: what the pickled writer's ``write`` runs. Runs in Spark
executors (Python workers).

A task writes its input's batches (at-least-once: :mod:`~kafka_direct.producer.write`; exactly
once: one Kafka transaction, :mod:`~kafka_direct.producer.transactional`), checks that Spark
sent the whole input before anything is made final (:func:`_whole_input`), and reports what it
wrote to the driver's ``commit`` / ``abort`` (:class:`SinkCommitMessage`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from kafka_direct.errors import IncompleteInputError, KafkaClientError, KafkaDirectError
from kafka_direct.executor.task import task_info
from kafka_direct.executor.task_input import InputEnd, input_end
from kafka_direct.logs import ensure_worker_logging
from kafka_direct.producer.markers import TaskIdentity
from kafka_direct.producer.write import WriteResult, WriteSettings, write_batches

__all__ = ["SinkCommitMessage", "write_task"]

log = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task reports to ``commit`` / ``abort``: its records were acknowledged."""

    records: int
    batches: int
    seconds: float
    kind: str
    partition_id: int = -1
    attempt: int = 0
    batch_id: int | None = None
    #: exactly-once: an earlier attempt or run had committed these records; none written now.
    skipped: bool = False


def write_task(
    settings: WriteSettings, batches: Iterator[pa.RecordBatch], *, stream: bool
) -> SinkCommitMessage:
    ensure_worker_logging()
    partition_id, attempt, batch_id = task_info()
    batches = _whole_input(batches, settings, partition_id, attempt)
    try:
        if settings.transactions is None:
            result = write_batches(settings, batches, attempt=attempt)
        else:
            result = _write_transaction(settings, batches, partition_id, attempt, batch_id, stream)
    except KafkaDirectError as exc:
        # Spark prints the Python traceback inside its own message: keep it to the sentence.
        raise exc.with_traceback(None) from None
    return SinkCommitMessage(
        result.records, result.batches, result.seconds, result.kind, partition_id, attempt,
        batch_id, result.skipped,
    )  # fmt: skip


def _whole_input(
    batches: Iterator[pa.RecordBatch], settings: WriteSettings, partition_id: int, attempt: int
) -> Iterator[pa.RecordBatch]:
    """``batches``, then a check that Spark sent the whole input (:mod:`~kafka_direct.executor.
    task_input`). Raised from inside the writer's loop, so a cut-off input fails the write
    before anything is made final: an exactly-once task aborts its transaction; an
    at-least-once task stops, its records written so far stay, and Spark's retry writes all."""
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        yield batch
    end = input_end()
    exactly_once = settings.transactions is not None
    if end is InputEnd.COMPLETE or (end is InputEnd.UNKNOWN and not exactly_once):
        return
    what = (
        "its transaction is aborted: none of these rows is visible to read_committed readers"
        if exactly_once
        else "the rows produced so far stay in Kafka (at-least-once)"
    )
    cause = (
        "ended before Spark finished sending it: an operator upstream of the sink failed in "
        "this task attempt (Spark reports that error)"
        if end is InputEnd.CUT_OFF
        else "ended, but Spark's finish signal did not follow it, so the sink cannot tell a "
        "complete input from one cut off by an upstream failure"
    )
    topic = settings.columns.topic
    where = f"to topic '{topic}'" if topic else "to the topics of its 'topic' column"
    message = (
        f"The input of write task {partition_id} (attempt {attempt}) {where} {cause}. It had "
        f"received {rows} row(s); {what}. Spark's retry of the task writes its rows."
    )
    log.warning("%s", message)
    raise IncompleteInputError(message)


def _write_transaction(
    settings: WriteSettings,
    batches: Iterator[pa.RecordBatch],
    partition_id: int,
    attempt: int,
    batch_id: int | None,
    stream: bool,
) -> WriteResult:
    from kafka_direct.producer.transactional import write_transaction

    txn = settings.transactions
    assert txn is not None
    if stream and batch_id is None:
        raise KafkaClientError(
            "The exactly-once stream writer ran without a micro-batch id (Spark's local "
            "property 'streaming.sql.batchId' is not set in this task), so it cannot tell a "
            "replayed micro-batch from a new one; nothing was written.",
            code="_STATE",
        )
    task = TaskIdentity(
        partition_id,
        batch_id=batch_id if stream else None,
        write_id=None if stream else txn.write_id,
        write_started_ms=None if stream else txn.write_started_ms,
    )
    return write_transaction(settings, batches, task, attempt=attempt)
