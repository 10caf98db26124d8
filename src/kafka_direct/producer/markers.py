"""The exactly-once sink's bookkeeping: transactional ids, and the marker each task commits with
its records, read back to decide whether a task's work is already in Kafka. Pure: plain library,
imported by the driver (ids, prefixes) and by executors (markers); no Spark, no Kafka client.

A write task of the exactly-once sink (:mod:`~kafka_direct.producer.transactional`) owns one
transactional id, ``<prefix>-<Spark partition id>``, the same for every attempt of the task and
for every run of the query. In the transaction that carries its records it also commits a
*marker*: an offset of the consumer group named like the transactional id, on partition 0 of the
marker topic, whose metadata says which micro-batch (or which batch write) the records belong to,
how many there were, and a digest of them (:mod:`~kafka_direct.producer.digest`). Kafka commits
both or neither. Before writing, a task reads its marker back (committed offsets are read with
``require_stable`` under ``read_committed``, after ``init_transactions`` finished or aborted its
id's previous transaction) and :func:`decide`\\ s:

- nothing committed yet, or an earlier micro-batch: write;
- this very micro-batch (or batch write) already committed: skip, the records are in Kafka. Spark
  replays a micro-batch from the same offsets with the same plan, hence the same partitions; a
  replayed task that does not hold the rows of the committed one (another count, or the same
  count with another digest) shows that the plan (the partitioning, or the query) or the input
  changed, and is refused (:class:`ReplayMismatchError`): writing would duplicate, skipping
  could lose. The digest does not depend on the rows' order, which a replay need not keep. A
  marker committed before digests existed has none: its replay is checked by count only;
- a later micro-batch: the prefix belongs to another query, or the checkpoint went back; refused;
- a batch write's retried task that finds the marker of another batch write which began after
  its own (two writes share the prefix): refused, since its earlier attempt may have committed
  before the other write's marker replaced its own.

A task with no marker on the marker topic also looks at its group's markers on other topics
(:func:`committed_elsewhere`): one there for this very micro-batch means the marker topic
changed while the micro-batch was unfinished, and the task skips on that marker rather than
write its rows again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from urllib.parse import urlparse

from kafka_direct.config.kafka import KafkaConfig
from kafka_direct.errors import ConfigurationError, KafkaDirectError
from kafka_direct.producer.digest import scheme_of

__all__ = [
    "MARKER_VERSION",
    "Decision",
    "Marker",
    "MarkerMismatchError",
    "ReplayMismatchError",
    "TaskIdentity",
    "TransactionSettings",
    "check_prefix",
    "check_replay",
    "committed_elsewhere",
    "decide",
    "prefix_from_checkpoint",
    "transactional_id",
]

MARKER_VERSION = 1

#: Kafka's limit on a committed offset's metadata is the broker's offset.metadata.max.bytes
#: (4096 by default); a marker stays far below it.
_PREFIX_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


class MarkerMismatchError(KafkaDirectError):
    """A task's marker shows that its transactional id belongs to another query or write."""


class ReplayMismatchError(MarkerMismatchError):
    """A replayed micro-batch's task does not hold the rows the committed one held."""


@dataclass(frozen=True)
class TransactionSettings:
    """What an exactly-once write task needs beyond an at-least-once one: built on the driver."""

    #: Every task's transactional id is ``<prefix>-<partition id>``.
    prefix: str
    #: The topic whose partition 0 carries the markers (it must exist; no record goes there).
    marker_topic: str
    #: A batch write's id (made once per ``df.write``, or ``transactionalWriteId``); None for a
    #: stream.
    write_id: str | None = None
    #: The connection settings of the marker reader (the user's, without producer-only keys).
    consumer_config: KafkaConfig = field(default_factory=KafkaConfig)
    #: ``transactionReplayCheck=rows``: markers carry the rows' digest and a replay is checked
    #: by it, not only by its count.
    check_rows: bool = True
    #: When the batch write began, by its driver's clock (ms since the epoch); None for a stream.
    write_started_ms: int | None = None
    #: The write id is the user's ``transactionalWriteId``: a re-run of the write skips the
    #: tasks that committed.
    write_id_given: bool = False


@dataclass(frozen=True)
class TaskIdentity:
    """Which write a task belongs to: a micro-batch of a stream, or one batch write."""

    partition: int
    #: The micro-batch (streams), else None.
    batch_id: int | None = None
    #: The batch write's id, made once on the driver (``df.write``), else None.
    write_id: str | None = None
    #: When the batch write began, by its driver's clock (ms since the epoch), else None.
    write_started_ms: int | None = None

    def describe(self) -> str:
        if self.batch_id is not None:
            return f"micro-batch {self.batch_id}, partition {self.partition}"
        return f"batch write {self.write_id}, partition {self.partition}"


@dataclass(frozen=True)
class Marker:
    """What a task committed with its records (the metadata of its group's committed offset)."""

    records: int
    batch_id: int | None = None
    write_id: str | None = None
    attempt: int = 0
    #: The digest of the rows (hex), None in a marker written before digests existed.
    digest: str | None = None
    #: A batch write's start (:attr:`TaskIdentity.write_started_ms`); None for a stream, and in
    #: a marker written before starts were kept.
    started_ms: int | None = None

    def offset(self) -> int:
        """The committed offset: the micro-batch + 1 (so tools show progress), 1 for a batch."""
        return self.batch_id + 1 if self.batch_id is not None else 1

    def encode(self) -> str:
        fields: dict[str, object] = {"v": MARKER_VERSION, "records": self.records}
        if self.batch_id is not None:
            fields["batch"] = self.batch_id
        if self.write_id is not None:
            fields["write"] = self.write_id
        fields["attempt"] = self.attempt
        if self.digest is not None:
            fields["digest"] = self.digest
        if self.started_ms is not None:
            fields["started"] = self.started_ms
        return json.dumps(fields, separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, metadata: str | None) -> Marker | None:
        """The marker in a committed offset's metadata; None for a group that has none of ours
        (nothing committed, or not a marker)."""
        if not metadata:
            return None
        try:
            fields = json.loads(metadata)
        except ValueError:
            return None
        if not isinstance(fields, dict) or "v" not in fields:
            return None
        if fields["v"] != MARKER_VERSION:
            # A marker of another kafka_direct release (a downgrade, or a cluster mid-upgrade):
            # read as "nothing committed" it would write a committed task again.
            raise MarkerMismatchError(
                f"A task's marker has format version {fields['v']!r}, which this kafka_direct "
                f"(version {MARKER_VERSION}) cannot read: a newer kafka_direct committed it. "
                "Run every worker on that release (or a newer one) before the query goes on; "
                "nothing was written."
            )
        batch, write, digest = fields.get("batch"), fields.get("write"), fields.get("digest")
        started = fields.get("started")
        return cls(
            records=int(fields.get("records", 0)),
            batch_id=int(batch) if batch is not None else None,
            write_id=str(write) if write is not None else None,
            attempt=int(fields.get("attempt", 0)),
            digest=str(digest) if digest is not None else None,
            started_ms=int(started) if started is not None else None,
        )


class Decision(Enum):
    WRITE = "write"
    #: Committed already by an earlier attempt or run: the task writes nothing.
    SKIP = "skip"


def decide(marker: Marker | None, task: TaskIdentity, txn_id: str, *, attempt: int = 0) -> Decision:
    """Whether ``task`` still has to write, given its transactional id's last marker (module
    docstring); ``attempt`` is Spark's attempt number of the task. A skip is confirmed by
    :func:`check_replay` once the task's rows are counted."""
    if marker is None:
        return Decision.WRITE
    if task.batch_id is not None:
        if marker.batch_id is None:
            raise MarkerMismatchError(
                f"Transactional id '{txn_id}' was last used by a batch write ({marker.write_id}), "
                f"not by a stream: this stream's {task.describe()} cannot tell what it wrote. "
                "Give the stream a 'transactionalIdPrefix' of its own."
            )
        if marker.batch_id < task.batch_id:
            return Decision.WRITE
        if marker.batch_id == task.batch_id:
            return Decision.SKIP
        raise MarkerMismatchError(
            f"Transactional id '{txn_id}' already committed micro-batch {marker.batch_id}, later "
            f"than this {task.describe()}: another query uses the same 'transactionalIdPrefix', "
            "or this query's checkpoint was reset or replaced. Give this query a "
            "'transactionalIdPrefix' of its own (a new checkpointLocation derives a new one)."
        )
    if marker.write_id == task.write_id:
        return Decision.SKIP
    if attempt > 0 and _began_after(marker, task):
        # Only a retry can lose this way: its earlier attempt may have committed, and the other
        # write's marker replaced that one. A first attempt that finds it writes (not a
        # duplicate), which also keeps two drivers' clocks apart from a first run's decision.
        raise MarkerMismatchError(
            f"Transactional id '{txn_id}' was last committed by batch write {marker.write_id}, "
            f"which began at {_when(marker.started_ms)}, after this {task.describe()} "
            f"(attempt {attempt}) began at {_when(task.write_started_ms)} (by each driver's "
            "clock): another df.write used the same 'transactionalIdPrefix' meanwhile. This "
            "retry cannot tell whether an earlier attempt of it committed before that write's "
            "marker replaced its own (writing again could duplicate its rows), so it writes "
            "nothing. Run one batch write at a time per prefix: give writes that may run "
            "together a 'transactionalIdPrefix' each."
        )
    return Decision.WRITE


def _began_after(marker: Marker, task: TaskIdentity) -> bool:
    return (
        marker.started_ms is not None
        and task.write_started_ms is not None
        and marker.started_ms > task.write_started_ms
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def committed_elsewhere(
    found: Mapping[str, Marker], task: TaskIdentity, txn_id: str, *, attempt: int = 0
) -> tuple[str, Marker] | None:
    """With no marker on the marker topic: the (topic, marker) of ``found`` (the id's group's
    markers on other topics) that shows ``task``'s work committed, or None. The marker topic
    then changed while that micro-batch (or batch write) was unfinished, and the task is
    skipped on that marker as on its own (:func:`check_replay` first): refusing instead would
    leave no way on, since the tasks that did write meanwhile have their markers on the new
    topic only. A marker there of an earlier micro-batch, or of another write, is history: the
    task writes, and its marker goes to the marker topic. A marker that :func:`decide` refuses
    (another query's) is refused as it would be on the marker topic."""
    for topic, marker in sorted(found.items()):
        if decide(marker, task, txn_id, attempt=attempt) is Decision.SKIP:
            return topic, marker
    return None


def _comparable(committed: str | None, replayed: str | None) -> bool:
    """Both digests exist and are of one scheme (``scheme:hex``). A marker from before digests,
    or from an order-sensitive digest without a scheme, is checked by its count only."""
    scheme = scheme_of(committed)
    return scheme is not None and scheme == scheme_of(replayed)


def check_replay(
    marker: Marker, task: TaskIdentity, rows: int, txn_id: str, digest: str | None = None
) -> None:
    """A skipped task's rows must be the committed ones: the same number, and the same digest
    when both sides have one (a marker from before digests has none: count only)."""
    committed = (
        f"The {task.describe()} was committed before, by attempt {marker.attempt} of that task, "
        f"with {marker.records} record(s) (transactional id '{txn_id}')"
    )
    if rows != marker.records:
        held = f"this replay holds {rows} row(s)"
    elif _comparable(marker.digest, digest) and digest != marker.digest:
        held = (
            f"this replay holds as many rows but other ones (their digest is {digest}, the "
            f"committed rows' {marker.digest})"
        )
    else:
        return
    raise ReplayMismatchError(
        f"{committed}, but {held}. A task commits only once Spark sent it its whole input, so "
        "the rows Spark replays for this task are not the committed ones: the query's plan, its "
        "partitioning or its input changed between the runs. The replay cannot be matched to "
        "what is already in Kafka (writing it would duplicate records, skipping it could lose "
        "some). Run the query with the plan it had when it stopped until this micro-batch is "
        "committed: the same query, and the same partitioning of its source (minPartitions, "
        "maxRecordsPerPartition and the other options that cut its input into tasks), across "
        "the restart; or start it with a new checkpoint and 'transactionalIdPrefix'. If the "
        "query's rows are not the same on a replay by design (rand() or uuid() in a written "
        "column), set .option('transactionReplayCheck', 'count') to check a replay by its count "
        "only."
    )


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id (and marker group) of a write task."""
    return f"{prefix}-{partition}"


def check_prefix(prefix: str) -> str:
    """``prefix`` if Kafka and ACLs can take it as the start of an id, else a clear error."""
    if not _PREFIX_PATTERN.match(prefix):
        raise ConfigurationError(
            "transactionalIdPrefix",
            prefix,
            "1 to 200 of the characters A-Z a-z 0-9 . _ -",
            "It starts every write task's transactional id and consumer group name.",
        )
    return prefix


def prefix_from_checkpoint(location: str) -> str:
    """A stream's default prefix: stable across restarts of the query from ``location``, and
    different for every other checkpoint. A relative local path is made absolute first, as
    Spark resolves it (the driver's working directory must then stay the same), and a
    ``file:`` URL is taken as its path."""
    location = location.strip()
    parsed = urlparse(location)
    if parsed.scheme == "file":  # file:/x, file:///x and /x are one checkpoint
        location = parsed.path
        parsed = urlparse(location)
    if not parsed.scheme or len(parsed.scheme) == 1:  # a local path (or a Windows drive)
        location = os.path.abspath(location)
    location = location.rstrip("/") or "/"
    digest = hashlib.sha256(location.encode("utf-8")).hexdigest()[:16]
    return f"kafka-direct-{digest}"
