"""The benchmark suite behind ``python benchmarks/run.py``, one module per part of a run.

``benchmarks/run.py`` is the command: it parses the options, runs the phases in order and prints
the table. It imports this package as ``kafka_direct_bench`` because Python puts the script's
directory, ``benchmarks/``, first on ``sys.path``. The raw readers and the latency producer run
in spawned child processes, which unpickle their functions by module name
(``kafka_direct_bench.raw.raw_read_partition``): a spawned child gets its parent's ``sys.path``,
so it imports this package the same way. No module imports PySpark at import time, so those
children stay small.

- :mod:`.config`          the configuration and the command line;
- :mod:`.common`          log lines, medians and percentiles;
- :mod:`.dataset`         topics, and the data set with a fixed seed;
- :mod:`.raw`             plain confluent-kafka readers and the paced producer (child processes);
- :mod:`.procstats`       CPU seconds and RSS per process, read from ``/proc``;
- :mod:`.executor_stats`  the executors' per-task lines (``KAFKA_DIRECT_STATS_DIR``), pool figures;
- :mod:`.floor_source`    the Python data source that reads no Kafka (Spark's floor);
- :mod:`.spark_reads`     the local Spark session and its reads: batch, stream, latency, floor;
- :mod:`.phases`          the fixed-cost and memory phases, built on those reads;
- :mod:`.planning`        the driver-side planning time per trigger and its admin requests;
- :mod:`.results`         what a run records, the machine, and the medians, ratios and checks;
- :mod:`.report`          the table and the JSON file;
- :mod:`.bytecode`        the benchmarked kafka_direct's bytecode, written at first import.
"""

from kafka_direct_bench.bytecode import compile_checkout

compile_checkout()
