"""The data sets of ``python benchmarks/oracle.py --suite`` and the options each row sets for
them. Pure: imports neither PySpark nor confluent-kafka; runs in the benchmark process and in
its spawned floor children (which rebuild the values from the spec instead of receiving them).

A data set is a value generator, a record count at scale 1, a topic configuration and a codec:

- ``100b``:      100 random bytes, uncompressed (the earlier benchmarks' data set);
- ``json1k-lz4``, ``json1k-zstd``: about 1 KB of JSON-like text (an event with a user, a URL,
  tags and properties, drawn from small vocabularies with a fixed seed), stored compressed: the
  topic's ``compression.type`` and the producer's codec are the same, so the broker keeps the
  producer's batches as they are;
- ``1mb``:       1 MiB random records, few of them; the topic's ``max.message.bytes`` and the
  clients' request limits are raised, without which no client can write them at all.

The options a row needs to work at all (:func:`required_write_options`) are set on every row,
defaults included: they are not tuning. What a user sets to go faster is in
:func:`tuned_read_options` and :func:`tuned_write_options`.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field

#: Records cycle through this many distinct values: enough that a producer batch (at most
#: ``batch.size``, 1 MB below) holds no value twice, so a codec sees no artificial repeats.
DISTINCT = 4096
#: Fewer distinct large values: 16 x 1 MiB already spans 16 producer requests.
DISTINCT_LARGE = 16
MIB = 1024 * 1024
#: Request and record limits for the 1 MiB data set (a record plus its batch overhead must fit).
LARGE_LIMIT = 4 * MIB


@dataclass(frozen=True)
class Dataset:
    name: str
    kind: str  # "random" or "json"
    size: int  # bytes per value (for "json", the target; values vary a little around it)
    records: int  # at scale 1
    codec: str = "none"  # the topic's and the producer's compression.type
    topic_config: dict[str, str] = field(default_factory=dict)

    def scaled(self, scale: float, partitions: int) -> int:
        """Records at ``scale``: at least two per partition."""
        return max(2 * partitions, int(self.records * scale))

    def describe(self) -> str:
        codec = "uncompressed" if self.codec == "none" else self.codec
        what = "JSON-like" if self.kind == "json" else "random"
        return f"{human_size(self.size)} {what}, {codec}"


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset("100b", "random", 100, 2_000_000),
        Dataset("json1k-lz4", "json", 1024, 500_000, "lz4", {"compression.type": "lz4"}),
        Dataset("json1k-zstd", "json", 1024, 500_000, "zstd", {"compression.type": "zstd"}),
        Dataset("1mb", "random", MIB, 1_000, "none", {"max.message.bytes": str(LARGE_LIMIT)}),
    )
}


def human_size(size: int) -> str:
    if size >= MIB:
        return f"{size // MIB} MiB"
    if size >= 1024:
        return f"{size // 1024} KiB"
    return f"{size} B"


def parse_datasets(text: str) -> list[Dataset]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in DATASETS]
    if unknown or not names:
        raise SystemExit(
            f"--datasets {text!r}: unknown {unknown or 'empty list'}; expected a comma list of "
            f"{', '.join(DATASETS)}"
        )
    return [DATASETS[n] for n in names]


_WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
)  # fmt: skip
_EVENTS = ("page_view", "add_to_cart", "checkout", "search", "login", "logout", "click")
_COUNTRIES = ("DE", "FR", "US", "GB", "JP", "BR", "IN", "ES", "IT", "NL")


def _json_value(rnd: random.Random, i: int, target: int) -> bytes:
    """One JSON-like event of about ``target`` bytes (a production topic's typical value)."""
    event = {
        "event_id": f"{rnd.getrandbits(64):016x}-{i:08d}",
        "ts": f"2026-11-{1 + rnd.randrange(28):02d}T{rnd.randrange(24):02d}:"
        f"{rnd.randrange(60):02d}:{rnd.randrange(60):02d}.{rnd.randrange(1000):03d}Z",
        "type": rnd.choice(_EVENTS),
        "user": {
            "id": rnd.randrange(10_000_000),
            "name": " ".join(rnd.choice(_WORDS) for _ in range(2)).title(),
            "country": rnd.choice(_COUNTRIES),
            "premium": rnd.random() < 0.2,
        },
        "url": "https://shop.example.com/"
        + "/".join(rnd.choice(_WORDS) for _ in range(3))
        + f"?ref={rnd.choice(_WORDS)}&page={rnd.randrange(50)}",
        "tags": [rnd.choice(_WORDS) for _ in range(rnd.randrange(2, 6))],
        "props": {},
    }
    props: dict[str, object] = event["props"]  # type: ignore[assignment]
    length = len(json.dumps(event, separators=(",", ":")))
    while length < target - 40:
        key = f"{rnd.choice(_WORDS)}_{len(props)}"
        props[key] = rnd.choice(
            [rnd.randrange(100_000), round(rnd.random() * 1000, 3), rnd.choice(_WORDS)]
        )
        # '"key":value' plus a comma: the length without dumping the whole event again
        length += len(json.dumps({key: props[key]}, separators=(",", ":"))) - 2 + 1
    return json.dumps(event, separators=(",", ":")).encode()


def values(dataset: Dataset, seed: int = 7) -> list[bytes]:
    """The distinct values the records cycle through (fixed seed: every process gets the same).
    Built once per process (the JSON ones take a few seconds)."""
    return _values(dataset.name, seed)


@functools.cache
def _values(name: str, seed: int) -> list[bytes]:
    dataset = DATASETS[name]
    rnd = random.Random(f"{dataset.name}-{seed}")
    if dataset.kind == "json":
        return [_json_value(rnd, i, dataset.size) for i in range(DISTINCT)]
    distinct = DISTINCT_LARGE if dataset.size >= MIB else DISTINCT
    return [rnd.randbytes(dataset.size) for _ in range(distinct)]


def producer_settings(dataset: Dataset) -> dict[str, str]:
    """librdkafka settings that load the data set (and that the write floor adds to the sink's)."""
    out: dict[str, str] = {}
    if dataset.codec != "none":
        out["compression.type"] = dataset.codec
    if dataset.size >= MIB:
        out["message.max.bytes"] = str(LARGE_LIMIT)
    return out


def required_write_options(dataset: Dataset, fmt: str) -> dict[str, str]:
    """What a writer of this data set must set to write it at all (every row, defaults too):
    the Java producer refuses a request above ``max.request.size`` (1 MiB by default),
    librdkafka a message above ``message.max.bytes`` (1,000,000 by default)."""
    if dataset.size < MIB:
        return {}
    if fmt == "kafka":
        return {"kafka.max.request.size": str(LARGE_LIMIT)}
    return {"kafka.message.max.bytes": str(LARGE_LIMIT)}


def codec_option(dataset: Dataset) -> dict[str, str]:
    """The producer codec a user of a compressed topic sets (the topic's own)."""
    return {} if dataset.codec == "none" else {"kafka.compression.type": dataset.codec}


def parse_kv(text: str) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` (empty: no options)."""
    out = {}
    for item in text.split(","):
        if item.strip():
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"{item!r}: expected KEY=VALUE")
            out[key.strip()] = value.strip()
    return out


#: The Java consumer as a user tunes it for throughput: no 500 ms wait at the log end, big polls,
#: big fetches. (``minPartitions`` only splits a Kafka partition into more tasks; at 2 and 100
#: partitions on 2 cores each core already has a task, so it is left to ``--jvm-tuned-read``.)
DEFAULT_TUNED_READ = (
    "kafka.fetch.max.wait.ms=10,kafka.max.poll.records=20000,"
    "kafka.fetch.max.bytes=67108864,kafka.max.partition.fetch.bytes=16777216"
)
#: The Java producer as a user tunes it: kafka_direct's own linger, bigger batches (the codec is
#: the topic's, from :func:`codec_option`).
DEFAULT_TUNED_WRITE = "kafka.linger.ms=50,kafka.batch.size=262144"


def tuned_read_options(text: str) -> dict[str, str]:
    return parse_kv(text)


def tuned_write_options(text: str, dataset: Dataset) -> dict[str, str]:
    return {**parse_kv(text), **codec_option(dataset)}
