"""The PySpark data source: ``spark.read`` / ``spark.readStream`` ``.format("kafka_direct")``, its
registration and worker site, and what reaches users from a running query (lag, data loss).
Runs in the Spark driver's Python processes (planner, stream runner) and, pickled, in executors.
"""
