"""What kafka_direct's two C extensions share: the C sources compiled into both (librdkafka's
ABI, error events, log lines; see ``_rdkafka_abi.h``) and their Python loader
(:mod:`~kafka_direct._native.loader`). Runs in Spark executors (Python workers), and wherever
a fast path's status is asked.
"""
