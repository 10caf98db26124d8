#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: unit tests, then integration tests
# against real Apache Kafka (KafkaCluster; or KAFKA_BOOTSTRAP_SERVERS, or
# KAFKA_DIRECT_TEST_BROKER=tansu), PostgreSQL, MariaDB and a local Spark, then the Tansu smoke
# set on the embedded broker. Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -k options
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
cd "$ROOT"
# A class-data-sharing archive of a Spark driver's classes, which every driver the suite starts
# then maps instead of parsing PySpark's jars again (kafka_direct.testing.jvm_archive; made once
# per JVM and PySpark into ~/.cache/kafka_direct/cds, meanwhile the linters run).
archive_log="$(mktemp)"
python -m kafka_direct.testing.jvm_archive > "$archive_log" 2>&1 &
archive=$!
ruff check .
mypy
bash scripts/docs.sh build
# The database servers of the store tests (installed from Debian's packages when absent).
bash "$ROOT/scripts/services.sh"
archive_status=0
wait "$archive" || archive_status=$?
cat "$archive_log"
if [ "$archive_status" -ne 0 ]; then
  echo "[test] WARNING: no Spark driver class archive (above); the drivers start without one"
fi
# Apache Kafka's jars: fetched once into ~/.cache/kafka_direct/jars (Ivy from PySpark), so the
# pytest workers do not race to fetch them; a no-op once cached.
if [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ] && [ "${KAFKA_DIRECT_TEST_BROKER:-kafka}" = "kafka" ]; then
  start=$SECONDS
  python -W "ignore::RuntimeWarning:runpy" -m kafka_direct.testing.kafka_cluster --fetch-only
  echo "[test] Kafka jars ready in $((SECONDS - start)) s"
fi
# The bulk mostly waits on brokers, triggers and subprocesses: three pytest workers finish it
# sooner than two on 2 cores (docs/testing.md; --dist loadfile keeps a file's module fixtures
# in one process). Each worker starts one Kafka node for its session; tests make
# their own topics. Tests marked "serial" (timing-sensitive or CPU-heavy: the fault suite, the
# receiver streams, the driver SIGKILLs) then run apart from the bulk: two files at a time, each
# on its own worker and Kafka node, since they mostly wait on subprocess drivers and brokers
# (they passed so at load average 17). KAFKA_DIRECT_TEST_WORKERS=N runs every part on N workers;
# 0 runs them in this process, one test at a time.
main_workers="${KAFKA_DIRECT_TEST_WORKERS:-3}"
workers="${KAFKA_DIRECT_TEST_WORKERS:-2}"
status=0
# The differential suite's virtualenv (below) is made meanwhile: mostly a download and pip.
oracle_log="$(mktemp)"
oracle_prep=""
if [ "$#" -eq 0 ]; then
  bash "$ROOT/scripts/oracle-venv.sh" --prepare > "$oracle_log" 2>&1 &
  oracle_prep=$!
fi
# The differential suite (Spark's own connector next to kafka_direct) runs apart, below: its
# conftest puts the connector into every Spark it starts.
python -m pytest -n "$main_workers" --dist loadfile -m "not serial" \
  --ignore=tests/integration/differential "$@" || status=$?
serial=0
python -m pytest -n "$workers" --dist loadfile -m serial \
  --ignore=tests/integration/differential "$@" || serial=$?
# 5: no test selected (e.g. scripts/test.sh tests/unit), which is not a failure of this part.
if [ "$serial" -ne 0 ] && [ "$serial" -ne 5 ]; then status=$serial; fi
if [ "$status" -eq 5 ] && [ "$serial" -eq 0 ]; then status=0; fi
# Spark's own format("kafka") next to format("kafka_direct"), on a PySpark whose connector Maven
# Central serves: scripts/oracle-venv.sh pins one in .venv-oracle when the installed PySpark has
# none yet, and says so. Only in a full run (scripts/oracle-venv.sh [pytest args] runs it alone).
if [ -n "$oracle_prep" ]; then
  oracle=0
  wait "$oracle_prep" || oracle=$?
  cat "$oracle_log"
  if [ "$oracle" -eq 0 ]; then
    bash "$ROOT/scripts/oracle-venv.sh" -n "$workers" --dist loadfile || oracle=$?
  fi
  if [ "$oracle" -ne 0 ]; then status=$oracle; fi
fi
# The embedded Tansu broker is the demo's broker: a smoke set (read, stream, sink, restart)
# keeps the library working on it. Only in a full run (no pytest arguments given).
if [ "$#" -eq 0 ] && [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  smoke=0
  KAFKA_DIRECT_TEST_BROKER=tansu python -m pytest -m tansu_smoke tests/integration || smoke=$?
  if [ "$smoke" -ne 0 ]; then status=$smoke; fi
fi
exit "$status"
