# Type stub of the C extension kafka_direct.producer._rdkafka_produce (sources in _native/, and
# the code shared with the read side's extension in kafka_direct/_native/).
# mypy checks kafka_direct.producer.native against it; keep both in step with the C.

from collections.abc import Mapping

#: A binary or string column: (array offset, length, validity or None, offsets, data, whether
#: the offsets are int64).
BinaryColumn = tuple[int, int, object | None, object, object, bool]

#: An int32 column: (array offset, length, validity or None, data).
Int32Column = tuple[int, int, object | None, object]

#: Spark's headers column: (array offset, length, validity or None, list offsets, whether they
#: are int64, the entries' offset, their length, their validity or None, keys, values).
HeadersColumn = tuple[
    int, int, object | None, object, bool, int, int, object | None, BinaryColumn, BinaryColumn
]

#: Why ``produce`` stopped: (kind, row, code, reason, topic, partition).
Stopped = tuple[int, int, int, str, str, int]

#: What ``take_events`` hands over: error events (code, reason, fatal), log lines (syslog level,
#: facility, line), how many older lines were dropped, and the worst level among them.
Events = tuple[list[tuple[int, str, bool]], list[tuple[int, str, str]], int, int]

class Producer:
    #: Whether log lines come to ``take_events`` (else the handle runs with log_level 0).
    routes_logs: bool
    #: How often ``produce`` found librdkafka's queue full and waited for room.
    full_waits: int
    def __init__(self, config: Mapping[str, str], route_logs: bool = ...) -> None: ...
    def produce(
        self,
        rows: int,
        value: BinaryColumn,
        key: BinaryColumn | None,
        topic: str | None,
        topic_column: BinaryColumn | None,
        partition: Int32Column | None,
        headers: HeadersColumn | None,
        poll_every: int,
    ) -> Stopped | None: ...
    def poll(self, timeout_s: float) -> int: ...
    def flush(self, timeout_s: float) -> int: ...
    def purge(self) -> None: ...
    def outq_len(self) -> int: ...
    #: (failed records, code, reason, topic, partition) of the first failed delivery.
    def delivery_error(self) -> tuple[int, int, str, str, int] | None: ...
    def fatal_error(self) -> tuple[int, str] | None: ...
    def take_events(self) -> Events | None: ...
    def close(self) -> None: ...

def load(path: str) -> str: ...
def logs_routable() -> bool: ...
def set_failure(cls: type[BaseException]) -> None: ...
