#!/usr/bin/env bash
# Run the real-Kafka tests and the differential suite against several Apache Kafka releases, one
# release after another, and print a table of what passed (docs/testing.md, "Kafka versions").
#
#   bash scripts/kafka-versions.sh                          # 3.9.1, the default, 4.4.0; everything
#   bash scripts/kafka-versions.sh 3.9.1 4.4.0              # those releases
#   bash scripts/kafka-versions.sh 4.4.0 -- tests/integration/test_batch_read.py -k exact
#                                                           # pytest arguments for the real-Kafka
#                                                           # part (the differential part is whole)
#   KAFKA_DIRECT_DIFFERENTIAL_ARGS="tests/integration/differential/test_sink.py" \
#     bash scripts/kafka-versions.sh 3.9.1 -- tests/integration/test_sink_batch.py
#
# KAFKA_DIRECT_KAFKA_VERSION chooses the release of every KafkaCluster that names none, so every
# test (the session's broker, and the clusters tests start themselves) runs on it. Its jars are
# fetched once from Maven Central into ~/.cache/kafka_direct/jars. KAFKA_DIRECT_DIFFERENTIAL=0
# leaves the differential suite out; KAFKA_DIRECT_TEST_WORKERS as in scripts/test.sh (default 2;
# 0 runs in one process). CI runs the default release only (scripts/test.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
cd "$ROOT"

say() { printf '[kafka-versions] %s\n' "$*" >&2; }

versions=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
default="$(python -c 'from kafka_direct.testing.broker_config import KAFKA_VERSION as v; print(v)')"
[ "${#versions[@]}" -eq 0 ] && versions=(3.9.1 "$default" 4.4.0)
for v in "${versions[@]}"; do
  if ! [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    say "ERROR: '$v' is not a Kafka release such as 3.9.1 or $default (pytest arguments go after --)."
    exit 2
  fi
done
if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] || [ "${KAFKA_DIRECT_TEST_BROKER:-kafka}" != "kafka" ]; then
  say "ERROR: unset KAFKA_BOOTSTRAP_SERVERS and KAFKA_DIRECT_TEST_BROKER: this runs the tests on"
  say "       the KafkaCluster brokers it starts, one Kafka release at a time."
  exit 2
fi
bash "$ROOT/scripts/services.sh"  # the store tests' databases

workers="${KAFKA_DIRECT_TEST_WORKERS:-2}"
parallel=()
[ "$workers" != "0" ] && parallel=(-n "$workers" --dist loadfile)
read -r -a differential_args <<< "${KAFKA_DIRECT_DIFFERENTIAL_ARGS:-}"

# pytest's exit 5 (nothing selected, e.g. only serial tests were named) is not a failure.
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }

results=()
status=0
for v in "${versions[@]}"; do
  export KAFKA_DIRECT_KAFKA_VERSION="$v"
  say "Apache Kafka $v: fetching its jars (once)"
  python -W "ignore::RuntimeWarning:runpy" -m kafka_direct.testing.kafka_cluster --fetch-only
  start=$SECONDS
  real=0
  if [ "$#" -gt 0 ]; then
    python -m pytest "${parallel[@]}" --ignore=tests/integration/differential "$@" || real=$?
  else
    # As scripts/test.sh: the timing-sensitive tests apart, after the rest.
    python -m pytest "${parallel[@]}" -m "not serial" tests/integration \
      --ignore=tests/integration/differential || real=$?
    serial=0
    python -m pytest "${parallel[@]}" -m serial tests/integration \
      --ignore=tests/integration/differential || serial=$?
    if ok "$real"; then real=$serial; fi
  fi
  oracle="-"
  if [ "${KAFKA_DIRECT_DIFFERENTIAL:-1}" != "0" ]; then
    oracle=0
    bash "$ROOT/scripts/oracle-venv.sh" "${parallel[@]}" "${differential_args[@]}" || oracle=$?
  fi
  ok "$real" || status=1
  [ "$oracle" = "-" ] || ok "$oracle" || status=1
  results+=("$(printf '%-8s real-Kafka tests: exit %-3s differential: exit %-3s %5d s' \
    "$v" "$real" "$oracle" "$((SECONDS - start))")")
done
say "Results (exit 0 = passed):"
for line in "${results[@]}"; do say "  $line"; done
exit "$status"
