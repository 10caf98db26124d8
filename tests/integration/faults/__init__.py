"""The fault suite: real faults injected under real streams, exact output checked.

Grouped by fault source: librdkafka's mock cluster (slow, down, moving and erroring brokers,
deleted records), the embedded Tansu broker (paused, crashed on durable storage), and a Spark
standalone cluster (a worker killed). Only the public API, ``kafka_direct.testing`` and the
integration helpers are used, never the library's internal modules.
"""
