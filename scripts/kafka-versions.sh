#!/usr/bin/env bash
# Run the real-Kafka tests and the differential suite against several Apache Kafka releases, one
# release after another, and print a table of what passed (docs/testing.md, "Kafka versions").
#
#   bash scripts/kafka-versions.sh                          # 3.9.1, the default, 4.4.0; everything
#   bash scripts/kafka-versions.sh 3.9.1 4.4.0              # those releases
#   bash scripts/kafka-versions.sh --subset                 # the representative subset below
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

# --subset: what docs/testing.md records as run on each release, one or two tests of each path.
I=tests/integration
SUBSET=(
  "$I/test_batch_read.py::test_batch_read_returns_every_record_exactly_once_with_all_fields"
  "$I/test_batch_read.py::test_offsets_json_bounds_are_exact_and_exclusive"
  "$I/test_streaming.py::test_exact_output_then_restart_from_checkpoint_loses_and_repeats_nothing"
  "$I/test_streaming.py::test_available_now_reads_exactly_the_backlog_and_stops"
  "$I/test_sink_batch.py::test_known_rows_are_written_exactly_once_with_their_content"
  "$I/test_sink_batch.py::test_keyed_records_land_on_javas_murmur2_partition"
  "$I/test_sink_exactly_once.py::test_a_replayed_task_finds_its_marker_and_writes_nothing_again"
  "$I/test_sink_exactly_once.py::test_a_batch_write_whose_tasks_fail_once_writes_each_record_once"
  "$I/test_direct_stream.py::test_exact_output_commits_after_the_function_and_restart_resumes_from_them"
  "$I/test_direct_stream.py::test_create_rdd_reads_exactly_the_given_ranges"
  "$I/test_stores_kafka.py::test_kafka_group_store_round_trip"
  "$I/test_stores_kafka.py::test_starting_offsets_json_from_a_group"
  "$I/test_group_commits.py::test_finished_batches_are_committed_to_the_group_and_a_new_query_resumes_there"
  "$I/test_transactions_and_discovery.py::test_transaction_marker_gaps_read_exactly_the_data_without_hanging[read_committed-gap-middle]"
  "$I/test_transactions_and_discovery.py::test_aborted_transaction_gaps_read_exactly_the_data_without_hanging[read_committed-aborted-gap-middle]"
  "$I/test_transactions_and_discovery.py::test_stream_over_a_transactional_topic_reads_every_committed_record"
  "$I/test_secured_kafka.py::test_plain_jaas_reads_and_writes_exactly"
  "$I/test_secured_kafka.py::test_a_reader_without_rights_is_told_who_may_not_read_what"
  "$I/test_kafka_cluster.py::test_one_broker_serves_exact_watermarks_and_survives_a_kill_and_restart"
  "$I/test_kafka_cluster.py::test_regression_brokers_outlive_the_thread_that_started_them"
)
SUBSET_DIFFERENTIAL="same_rows or every_shape or deleted_records or same_partition"
SUBSET_DIFFERENTIAL+=" or (same_end_offsets and uneven) or (switch_formats and kafka-all)"

subset=""
if [ "${1:-}" = "--subset" ]; then subset=1; shift; fi
versions=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
default="$(python -c 'from kafka_direct.testing.broker_config import KAFKA_VERSION as v; print(v)')"
[ "${#versions[@]}" -eq 0 ] && versions=(3.9.1 "$default" 4.4.0)
for v in "${versions[@]}"; do
  if ! [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    say "ERROR: '$v' is not a Kafka release such as 3.9.1 or $default"
    say "       (pytest arguments go after --)."
    exit 2
  fi
done
if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] \
  || [ "${KAFKA_DIRECT_TEST_BROKER:-kafka}" != "kafka" ]; then
  say "ERROR: unset KAFKA_BOOTSTRAP_SERVERS and KAFKA_DIRECT_TEST_BROKER: this runs the tests on"
  say "       the KafkaCluster brokers it starts, one Kafka release at a time."
  exit 2
fi

workers="${KAFKA_DIRECT_TEST_WORKERS:-2}"
parallel=()
[ "$workers" != "0" ] && parallel=(-n "$workers" --dist loadfile)
read -r -a differential_args <<< "${KAFKA_DIRECT_DIFFERENTIAL_ARGS:-}"
if [ -n "$subset" ]; then
  if [ "$#" -gt 0 ]; then
    say "ERROR: --subset names its own tests; give no pytest arguments."
    exit 2
  fi
  set -- "${SUBSET[@]}"
  differential_args=(-k "$SUBSET_DIFFERENTIAL")
fi

# pytest's exit 5 (nothing selected, e.g. only serial tests were named) is not a failure.
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }

bash "$ROOT/scripts/services.sh"  # the store tests' databases
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
