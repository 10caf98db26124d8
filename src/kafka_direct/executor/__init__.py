"""The executor floor that both wings stand on: the reads of :mod:`kafka_direct.consumer` and
the writes of :mod:`kafka_direct.producer`. Runs in Spark executors (Python workers).

- :mod:`~kafka_direct.executor.lease_pool`: the keyed pool that lends a Kafka client to one
  holder at a time, with each wing's small policy; its reaper thread
  (:mod:`~kafka_direct.executor.idle_reaper`) and its one-per-process holder
  (:mod:`~kafka_direct.executor.process_local`);
- :mod:`~kafka_direct.executor.task`: the running Spark task (its partition, attempt and
  micro-batch) and the per-task statistics line.

The C extensions' loader is beside the C both share, in :mod:`kafka_direct._native`.
"""
