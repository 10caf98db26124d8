"""Where a keyed record goes: Kafka's murmur2 partitioner. Pure: plain library.

Kafka's Java producer, and librdkafka's ``murmur2_random`` partitioner, put a keyed record on
partition ``toPositive(murmur2(key)) % partitions``. librdkafka's default (``consistent_random``,
CRC32) does not, so a key written by a JVM producer and by one with librdkafka's default land on
different partitions. This is the reference implementation (Java's ``Utils.murmur2``), for the
CLI's producer and for tests.
"""

from __future__ import annotations


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (Java ``Utils.murmur2``) as an unsigned 32-bit integer.

    librdkafka's ``murmur2_random`` partitioner uses the same function, so a partition computed
    here is the one either client would choose.
    """
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key``: Java's ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
