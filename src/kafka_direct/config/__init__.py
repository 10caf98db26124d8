"""Every option, parsed and validated once, and the Kafka client settings built from them. Pure:
plain library (no Spark, no Kafka client), used by every process.

- :mod:`~kafka_direct.config.kafka`: ``KafkaConfig`` (a librdkafka config that never prints its
  secrets), redaction, and ``Subscription`` (which partitions a read names);
- :mod:`~kafka_direct.config.defaults`: every source option's default, the ``kafka.*`` keys the
  library owns, durations;
- :mod:`~kafka_direct.config.source`: the source's options (``spark.read``/``readStream``);
- :mod:`~kafka_direct.config.dstream`: the DStream-style API's ``kafkaParams`` and arguments;
- :mod:`~kafka_direct.config.clients`: the librdkafka configs of the driver's admin client and the
  executors' consumers, each override with its reason.
"""
