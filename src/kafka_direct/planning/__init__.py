"""Offset planning: where reads start and end, how ranges are split and rate-limited, what data
loss is, how long to wait for a cluster that does not answer. Pure: plain library, used by the
Spark driver; the cluster is reached only through the injected
:class:`~kafka_direct.planning.reader.OffsetReader`.

Every rule follows ``spark-sql-kafka-0-10`` unless it says it deliberately differs.
"""
