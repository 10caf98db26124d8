"""The DStream-style API: ``KafkaUtils.createDirectStream`` / ``createRDD``, the direct stream's
loop, its planner and commit queue, and the consumer and location strategies; the receiver
stream (``createStream``) in :mod:`kafka_direct.dstream.receiver`. Runs in the Spark driver (the
user's process); executors only run the batch reads it builds (and the receivers).
"""
