"""The receiver-based stream, Spark's ``KafkaUtils.createStream``. Runs in the Spark driver (the
loop, the supervisor) and in executors (the receivers, as long Spark tasks).

Receivers are members of the user's consumer group and log what they receive; the driver makes
each batch from the logged blocks. Driver side: :mod:`.stream` (the loop), :mod:`.supervisor`
(starts and restarts receivers), :mod:`.control` and :mod:`.policy` (signals and rules, pure),
:mod:`.progress`. Executor side: :mod:`.loop` (a receiver) and :mod:`.client` (its Kafka client
and Spark task). Both: the write-ahead log (:mod:`.wal`, :mod:`.wal_log`) and :mod:`.wal_source`,
the data source a batch reads the logged blocks with.
"""
