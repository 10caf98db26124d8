"""Every option, parsed and validated once, and the Kafka client settings built from them. Pure:
plain library (no Spark, no Kafka client), used by every process.

- :mod:`~kafka_direct.config.reader`: the one option reader and the one ``kafka.*`` validator,
  used by the source, the sink and the DStream API;
- :mod:`~kafka_direct.config.kafka`: ``KafkaConfig`` (a librdkafka config that never prints its
  secrets), redaction, and ``Subscription`` (which partitions a read names);
- :mod:`~kafka_direct.config.defaults`: every source option's default, the ``kafka.*`` keys the
  library owns, durations;
- :mod:`~kafka_direct.config.source`: the source's options (``spark.read``/``readStream``), in
  small frozen parts; :mod:`~kafka_direct.config.bounds`: which partitions a read names and
  where it starts and ends;
- :mod:`~kafka_direct.config.sink`: the sink's options (``df.write``/``writeStream``);
- :mod:`~kafka_direct.config.dstream`: the DStream-style API's ``kafkaParams`` and the direct
  stream's arguments; :mod:`~kafka_direct.config.receiver`: the receiver stream's;
- :mod:`~kafka_direct.config.clients`: every librdkafka client config (the driver's admin
  client, the executors' consumers, the sink's producers, the receivers), each override with
  its reason.
"""
