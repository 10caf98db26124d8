# Type stub of the C extension kafka_direct.consumer._rdkafka_arrow (sources in _native/).
# mypy checks kafka_direct.consumer.native against it; keep both in step with the C.

from collections.abc import Mapping

#: Column buffers of one read: key offsets, data and validity; value offsets, data and
#: validity; record offsets; timestamps (µs); timestamp types; and, with headers, their buffers.
Columns = tuple[object, ...]

#: (records kept, columns or None, offset of the last record taken off the queue or -1,
#:  whether a record at or past ``until`` came, log end / -1 (out of range) / None,
#:  error event (code, reason) or None)
ConsumeResult = tuple[int, Columns | None, int, bool, int | None, tuple[int, str] | None]

#: (records kept, columns or None, the slot of each row as int32 bytes or None,
#:  [(slot, last, beyond, log end / -1 (out of range) / None)] per slot touched, error or None)
ManyResult = tuple[
    int,
    Columns | None,
    bytes | None,
    list[tuple[int, int, bool, int | None]],
    tuple[int, str] | None,
]

#: What ``take_events`` hands over: error events (code, reason, fatal), log lines (syslog level,
#: facility, line), how many older lines were dropped, and the worst level among them.
Events = tuple[list[tuple[int, str, bool]], list[tuple[int, str, str]], int, int]

class Consumer:
    #: Whether log lines come to ``take_events`` (else the handle runs with log_level 0).
    routes_logs: bool
    def __init__(self, config: Mapping[str, str], route_logs: bool = ...) -> None: ...
    def assign(self, topic: str, partition: int, offset: int) -> None: ...
    def consume(
        self,
        partition: int,
        nxt: int,
        until: int,
        max_messages: int,
        timeout_s: float,
        max_bytes: int,
        headers: bool = ...,
    ) -> ConsumeResult | None: ...
    def assign_many(self, partitions: list[tuple[str, int, int]]) -> None: ...
    def consume_many(
        self,
        index: dict[tuple[str, int], int],
        bounds: bytes,
        max_messages: int,
        timeout_s: float,
        max_bytes: int,
        headers: bool = ...,
    ) -> ManyResult | None: ...
    def watermarks(self, topic: str, partition: int, timeout_ms: int) -> tuple[int, int]: ...
    def take_events(self) -> Events | None: ...
    def close(self) -> None: ...

def load(path: str) -> str: ...
def logs_routable() -> bool: ...
def set_failure(cls: type[BaseException]) -> None: ...
