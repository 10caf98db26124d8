"""librdkafka's mock Kafka cluster through ``ctypes``. Plain library: the user's test process.

confluent-kafka's wheel ships a librdkafka that exports the ``rd_kafka_mock_*`` API, the test
double librdkafka's own suite runs against. :class:`MockCluster` starts one with N brokers on
loopback ports and injects faults on demand::

    with MockCluster(brokers=3) as cluster:
        cluster.create_topic("events", partitions=2)
        cluster.produce("events", [b"a", b"b"], partition=0)   # [(0, 0), (0, 1)]
        cluster.broker_down(1)
        ...

Any Kafka client in any process (Spark's executors and Python workers included) reaches the
cluster through :attr:`MockCluster.bootstrap_servers` for as long as the process that started it
is alive: the brokers are threads of that process.

What the mock answers, checked with confluent-kafka 2.16.1 (librdkafka 2.16.0):

- ListOffsets earliest / latest are exact: ``latest`` is the last offset + 1, with no batch
  quirk (Tansu's watermark is off by a batch, see BROKER.md).
- ListOffsets by timestamp answers offset -1 for *every* timestamp, not only for one after the
  last record: the mock's handler has ``/* FIXME: by timestamp */ Offset = -1``. So it can test
  "no record at or after this time", never a lookup that lands inside the log.
- :meth:`MockCluster.delete_records` moves the partition's start offset: ``earliest`` answers
  ``before_offset`` at once and ``latest`` is unchanged. A fetch below the new start gets
  ``OFFSET_OUT_OF_RANGE``: a consumer with ``auto.offset.reset=error`` sees a
  ``_AUTO_OFFSET_RESET`` error event ("Offset out of range"); with ``earliest`` it resumes at the
  new start offset. An offset past the log end is refused (``OFFSET_OUT_OF_RANGE``). Do not move
  the start backwards: ``earliest`` then answers the smaller offset, but the records there are
  gone and a fetch is still out of range.
- :meth:`MockCluster.broker_down` closes the broker's connections and refuses new ones but does
  not move leadership, and metadata from the other brokers no longer lists it. For a partition
  it leads, ``AdminClient.list_offsets`` answers offset -1001 (``OFFSET_INVALID``) *without an
  error* once ``request_timeout`` passes, and a produced record fails with ``_MSG_TIMED_OUT``
  after ``message.timeout.ms``. After :meth:`MockCluster.broker_up` a new client works at once,
  but an admin client whose metadata was refreshed during the outage answers ``_NOENT`` ("No
  leaders found") until its metadata is refreshed again (``list_topics()``, or the periodic
  ``topic.metadata.refresh.interval.ms``, 5 minutes by default).
- :meth:`MockCluster.set_rtt` delays every response of one broker. A request given more time
  than the delay completes with the right answer, after at least the delay; ``list_offsets``
  with a shorter ``request_timeout`` answers -1001 without an error, like a broker that is down.
- :meth:`MockCluster.push_request_errors` makes the next requests of one API fail:
  ``list_offsets`` raises ``KafkaException`` with the pushed code, and the request after the
  pushed ones succeeds.
- ``AdminClient.create_topics`` times out on the mock (CreateTopics is not implemented): use
  :meth:`MockCluster.create_topic`, or let the first produce auto-create the topic.
- Aborted transactions are not filtered under ``read_committed``, as on Tansu (BROKER.md).

The mock API is experimental in librdkafka and outside its ABI guarantees: every function is
looked up by name and given its exact C signature here, and a missing one is reported by name.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import enum
import logging
import threading
from collections.abc import Iterable
from typing import Any

from kafka_direct._native.loader import librdkafka_path
from kafka_direct.errors import EmbeddedBrokerError

__all__ = ["ApiKey", "MockCluster", "librdkafka_path"]

logger = logging.getLogger(__name__)

_RD_KAFKA_PRODUCER = 0
_ERRSTR_SIZE = 512
_P = ctypes.c_void_p
_S = ctypes.c_char_p
_I32 = ctypes.c_int32
_ERR = ctypes.c_int  # rd_kafka_resp_err_t: a C enum, int-sized
# name: (restype, argtypes), copied from librdkafka 2.16's rdkafka.h and rdkafka_mock.h. Without
# restype ctypes truncates returned pointers to 32 bits, hence a declaration for every function.
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "rd_kafka_version_str": (_S, []),
    "rd_kafka_err2name": (_S, [_ERR]),
    "rd_kafka_conf_new": (_P, []),
    "rd_kafka_conf_destroy": (None, [_P]),
    "rd_kafka_conf_set": (ctypes.c_int, [_P, _S, _S, _S, ctypes.c_size_t]),
    "rd_kafka_new": (_P, [ctypes.c_int, _P, _S, ctypes.c_size_t]),
    "rd_kafka_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_new": (_P, [_P, ctypes.c_int]),
    "rd_kafka_mock_cluster_destroy": (None, [_P]),
    "rd_kafka_mock_cluster_bootstraps": (_S, [_P]),
    "rd_kafka_mock_topic_create": (_ERR, [_P, _S, ctypes.c_int, ctypes.c_int]),
    "rd_kafka_mock_broker_set_down": (_ERR, [_P, _I32]),
    "rd_kafka_mock_broker_set_up": (_ERR, [_P, _I32]),
    "rd_kafka_mock_broker_set_rtt": (_ERR, [_P, _I32, ctypes.c_int]),
    "rd_kafka_mock_partition_set_leader": (_ERR, [_P, _S, _I32, _I32]),
    "rd_kafka_mock_partition_delete_records": (_ERR, [_P, _S, _I32, ctypes.c_int64]),
    "rd_kafka_mock_push_request_errors_array": (
        None,
        [_P, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(_ERR)],
    ),
    "rd_kafka_mock_clear_request_errors": (None, [_P, ctypes.c_int16]),
}
_OWNER_CONFIG = {
    # The owner handle never sends anything; its log would only repeat the mock brokers' chatter.
    "log_level": "0",
    "client.id": "kafka_direct-mock-cluster",
}
_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = librdkafka_path()
        if path is None:
            raise EmbeddedBrokerError(
                "The mock cluster needs confluent-kafka's librdkafka, which was not found. "
                "Install confluent-kafka from its wheel (pip install confluent-kafka)."
            )
        # The same file confluent-kafka loaded, so dlopen hands back the library already mapped.
        lib = ctypes.CDLL(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                function = getattr(lib, name)
            except AttributeError as exc:
                raise EmbeddedBrokerError(
                    f"The librdkafka at {path} does not export {name}, which the mock cluster "
                    "needs (the mock API is experimental and changes between releases). Use "
                    "confluent-kafka >= 2.16 from its wheel."
                ) from exc
            function.restype = restype
            function.argtypes = argtypes
        _lib = lib
        return lib


class ApiKey(enum.IntEnum):
    """Kafka protocol API keys that tests most often push errors for."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    INIT_PRODUCER_ID = 22


class MockCluster:
    """A librdkafka mock cluster of ``brokers`` brokers (ids 1..brokers) owned by this process.

    Nothing starts in ``__init__``; :meth:`start` (or ``with MockCluster() as cluster``) does.
    :meth:`close` is idempotent and also runs at interpreter exit.
    """

    def __init__(self, brokers: int = 3) -> None:
        if brokers < 1:
            raise ValueError(f"A mock cluster needs at least one broker, got brokers={brokers}.")
        self.brokers = brokers
        self._lock = threading.Lock()
        self._rk: int | None = None
        self._mc: int | None = None
        self._bootstrap: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise EmbeddedBrokerError("The mock cluster is not started: call start() first.")
        return self._bootstrap

    @property
    def broker_ids(self) -> range:
        return range(1, self.brokers + 1)

    def start(self) -> MockCluster:
        """Create the owner handle and the cluster. Starting a started cluster does nothing."""
        with self._lock:
            if self._mc is not None:
                return self
            lib = _library()
            errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
            conf = lib.rd_kafka_conf_new()
            for key, value in _OWNER_CONFIG.items():
                if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE):
                    lib.rd_kafka_conf_destroy(conf)
                    raise EmbeddedBrokerError(
                        f"rd_kafka_conf_set({key}={value}) failed: {errstr.value.decode()}"
                    )
            # rd_kafka_new takes ownership of conf only when it succeeds.
            rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
            if not rk:
                lib.rd_kafka_conf_destroy(conf)
                raise EmbeddedBrokerError(f"rd_kafka_new failed: {errstr.value.decode()}")
            mc = lib.rd_kafka_mock_cluster_new(rk, self.brokers)
            if not mc:
                lib.rd_kafka_destroy(rk)
                raise EmbeddedBrokerError(
                    f"rd_kafka_mock_cluster_new({self.brokers}) returned NULL: librdkafka could "
                    "not open its loopback listeners."
                )
            self._rk, self._mc = rk, mc
            self._bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mc).decode()
            atexit.register(self.close)
        logger.info(
            "Mock cluster of %d brokers at %s (librdkafka %s)",
            self.brokers,
            self._bootstrap,
            lib.rd_kafka_version_str().decode(),
        )
        return self

    def close(self) -> None:
        """Destroy the cluster, then its owner handle. Clients still connected see it go down."""
        with self._lock:
            mc, rk = self._mc, self._rk
            self._mc = self._rk = self._bootstrap = None
            atexit.unregister(self.close)
        if mc is None or rk is None:
            return
        lib = _library()
        # In this order, as librdkafka's tests do: the cluster keeps a reference to its handle.
        lib.rd_kafka_mock_cluster_destroy(mc)
        lib.rd_kafka_destroy(rk)

    def _call(self, name: str, *args: Any, returns_error: bool = True) -> None:
        """Call the mock function ``name`` on this cluster; an error code becomes our error.

        Under the lock, so that close() cannot free the cluster in the middle of a call.
        """
        with self._lock:
            if self._mc is None:
                raise EmbeddedBrokerError(f"Cannot call {name}: the mock cluster is not started.")
            lib = _library()
            code = getattr(lib, name)(self._mc, *args)
        if returns_error and code:
            shown = ", ".join(repr(a.decode() if isinstance(a, bytes) else a) for a in args)
            raise EmbeddedBrokerError(
                f"{name}({shown}) failed on the mock cluster: "
                f"{lib.rd_kafka_err2name(code).decode()} ({code})"
            )

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create ``topic``. ``AdminClient.create_topics`` times out on the mock: use this.

        A replication factor above the number of brokers is clamped by the mock.
        """
        if partitions < 1:
            # The mock would create a topic without partitions, which no test means to.
            raise ValueError(f"A topic needs at least one partition, got partitions={partitions}.")
        self._call("rd_kafka_mock_topic_create", topic.encode(), partitions, replication_factor)

    def broker_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones (-1: all). Leaders do not move."""
        self._call("rd_kafka_mock_broker_set_down", broker_id)

    def broker_up(self, broker_id: int) -> None:
        """Accept connections on the broker again (-1: all)."""
        self._call("rd_kafka_mock_broker_set_up", broker_id)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the partition's leadership (-1: no leader). Creates the topic if needed."""
        self._call("rd_kafka_mock_partition_set_leader", topic.encode(), partition, broker_id)

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of the broker by ``rtt_ms`` (-1: all brokers; 0 to undo)."""
        self._call("rd_kafka_mock_broker_set_rtt", broker_id, rtt_ms)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Data loss: the partition's log now starts at ``before_offset`` (at most its end)."""
        self._call(
            "rd_kafka_mock_partition_delete_records", topic.encode(), partition, before_offset
        )

    def push_request_errors(self, api_key: int, *errors: int) -> None:
        """The next ``len(errors)`` requests of ``api_key`` (any broker) fail with ``errors``.

        ``api_key`` is the protocol's (:class:`ApiKey` names the usual ones); the
        errors are ``confluent_kafka.KafkaError`` codes. ``KafkaError._TRANSPORT`` makes the
        broker drop the connection instead of answering.
        """
        array = (_ERR * len(errors))(*errors)
        self._call(
            "rd_kafka_mock_push_request_errors_array",
            api_key,
            len(errors),
            array,
            returns_error=False,  # a void function
        )

    def clear_request_errors(self, api_key: int) -> None:
        """Drop the errors pushed for ``api_key`` that were not used yet."""
        self._call("rd_kafka_mock_clear_request_errors", api_key, returns_error=False)

    def produce(
        self,
        topic: str,
        values: Iterable[bytes | str],
        partition: int | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> list[tuple[int, int]]:
        """Produce ``values`` in order and wait for every delivery report.

        Returns the ``(partition, offset)`` of each value, in the order given. Any failed or
        missing delivery raises :class:`EmbeddedBrokerError`.
        """
        from confluent_kafka import KafkaError, Message, Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "linger.ms": 5,
                "acks": "all",
                # Idempotence keeps the order given even if a request is retried.
                "enable.idempotence": True,
                "message.timeout.ms": int(timeout_s * 1000),
            }
        )
        results: list[tuple[int, int] | None] = []
        failures: list[str] = []

        def report(index: int) -> Any:
            def on_delivery(err: KafkaError | None, msg: Message) -> None:
                partition, offset = msg.partition(), msg.offset()
                if err is not None:
                    failures.append(f"value #{index}: {err.str()} ({err.name()})")
                elif partition is None or offset is None:
                    failures.append(f"value #{index}: a delivery report without an offset")
                else:
                    results[index] = (partition, offset)

            return on_delivery

        for index, value in enumerate(values):
            results.append(None)
            payload = value.encode() if isinstance(value, str) else value
            kwargs: dict[str, Any] = {"on_delivery": report(index)}
            if partition is not None:
                kwargs["partition"] = partition
            producer.produce(topic, payload, **kwargs)
            producer.poll(0)
        left = producer.flush(timeout_s)
        delivered = [r for r in results if r is not None]
        if failures or left or len(delivered) != len(results):
            shown = "; ".join(failures[:5]) or f"{left} still in flight after {timeout_s:g} s"
            raise EmbeddedBrokerError(
                f"Producing {len(results)} values to '{topic}' on the mock cluster failed: "
                f"{len(delivered)} delivered. {shown}"
            )
        return delivered

    def __enter__(self) -> MockCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._bootstrap or "not started"
        return f"MockCluster(brokers={self.brokers}, {where})"
