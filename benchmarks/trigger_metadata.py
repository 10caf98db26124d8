"""What finding a stream's partitions costs at each trigger, by the number of topics in the cluster:
``python benchmarks/trigger_metadata.py``. Runs in its own process, with one Kafka broker (its
child) and no Spark.

A ``subscribe`` (or ``assign``) stream asks for its topics' partitions at every trigger. It can
describe just the topics it names (DescribeTopics, what ``AdminOffsetReader`` does and what
Spark's connector does), or list every topic of the cluster and pick its own (a metadata request
naming no topic, what ``subscribePattern`` must do). The listing grows with the cluster. Printed
per call, for each cluster size: the median wall time and this process's CPU (librdkafka's
threads included), through the reader and through raw librdkafka (``AdminClient``) each way::

    python benchmarks/trigger_metadata.py                       # 1, 500 and 1,500 topics
    python benchmarks/trigger_metadata.py --topics 1 3000 --calls 200

Run it on a quiet machine: the load is printed first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_direct_bench.common import loadavg

from kafka_direct.config.kafka import Subscription
from kafka_direct.kafka.offset_reader import AdminOffsetReader
from kafka_direct.testing import KafkaCluster
from kafka_direct.testing.topics import create_topic


def _grow(admin: AdminClient, have: int, want: int) -> None:
    """Create single-partition topics ``filler-<have>`` .. ``filler-<want - 1>``."""
    names = [f"filler-{i}" for i in range(have, want)]
    for start in range(0, len(names), 500):
        chunk = [NewTopic(n, 1, 1) for n in names[start : start + 500]]
        for future in admin.create_topics(chunk, operation_timeout=120).values():
            future.result(180)
    deadline = time.monotonic() + 120
    while len(admin.list_topics(timeout=30).topics) < want + 1:  # + the stream's topic
        if time.monotonic() > deadline:
            raise SystemExit(f"metadata did not list {want} filler topics within 120 s")
        time.sleep(0.2)


def _per_call(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median wall milliseconds and mean process-CPU milliseconds of one ``fn()``."""
    fn()  # warm: connections and the first metadata are not what a trigger pays
    walls = []
    cpu0 = time.process_time()
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - t0) * 1000)
    return statistics.median(walls), (time.process_time() - cpu0) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, nargs="+", default=[1, 500, 1500],
                        help="filler topics in the cluster besides the stream's")  # fmt: skip
    parser.add_argument("--calls", type=int, default=100, help="calls per case")
    args = parser.parse_args()
    print(f"load average {loadavg()}; {args.calls} calls per case", flush=True)
    with KafkaCluster() as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, "events", 4)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        strategy = Subscription("subscribe", topics=("events",))
        described = AdminOffsetReader({"bootstrap.servers": bootstrap})
        listed = AdminOffsetReader({"bootstrap.servers": bootstrap})
        described.connect()
        listed.connect()
        listed._describe = False  # what every trigger did before: list the whole cluster
        assert described.partitions(strategy) == listed.partitions(strategy)
        cases: list[tuple[str, Callable[[], object]]] = [
            ("reader, describes the topic", lambda: described.partitions(strategy)),
            ("reader, lists the cluster", lambda: listed.partitions(strategy)),
            ("librdkafka describe_topics", lambda: admin.describe_topics(
                TopicCollection(["events"]))["events"].result()),
            ("librdkafka list_topics", lambda: admin.list_topics(timeout=30)),
        ]  # fmt: skip
        have = 0
        print(f"{'topics':>7}  {'case':<30} {'wall ms (median)':>17} {'CPU ms':>8}")
        for want in sorted(args.topics):
            _grow(admin, have, want)
            have = want
            for name, fn in cases:
                wall, cpu = _per_call(fn, args.calls)
                print(f"{want + 1:>7}  {name:<30} {wall:>17.2f} {cpu:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
