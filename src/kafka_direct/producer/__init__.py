"""Executor-side writes: the Kafka sink's write task (:mod:`~kafka_direct.producer.write`), the
per-worker producer pool (:mod:`~kafka_direct.producer.pool`), the producer interface and its
Python implementation (:mod:`~kafka_direct.producer.batch_producer`). Runs in Spark executors
(Python workers); :mod:`~kafka_direct.producer.columns` (the sink's columns) and
:mod:`~kafka_direct.producer.partitioning` (Kafka's partitioner) are pure.
"""
