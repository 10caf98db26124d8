"""The confluent-kafka boundary on the driver: the one admin-client factory, the one error
translator, client events and logs, the offset reader, consumer-group offsets and lag. Runs in
the Spark driver (planner and stream-runner processes) and the user's process (the DStream API,
the CLI); :mod:`~kafka_direct.kafka.translate` and :mod:`~kafka_direct.kafka.events` also serve
executors.
"""
