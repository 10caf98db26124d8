"""The DStream-style API: ``KafkaUtils.createDirectStream`` / ``createRDD``, the direct stream's
loop, its planner and commit queue, and the consumer and location strategies. Runs in the Spark
driver (the user's process); executors only run the batch reads it builds.
"""
