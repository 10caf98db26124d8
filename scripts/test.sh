#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: unit tests, then integration tests
# against the embedded broker (or KAFKA_BOOTSTRAP_SERVERS) and a local Spark. Extra arguments go
# to pytest, e.g. scripts/test.sh tests/unit -k options
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
cd "$ROOT"
ruff check .
mypy
bash scripts/docs.sh build
# The suite mostly waits on brokers, triggers and subprocesses, so two pytest workers share the
# 2 cores well (--dist loadfile keeps a file's module fixtures in one process). Tests marked
# "serial" (timing-sensitive or CPU-heavy: the fault suite, the receiver streams) then run
# alone. KAFKA_DIRECT_TEST_WORKERS=0 runs the first part in this process too.
workers="${KAFKA_DIRECT_TEST_WORKERS:-2}"
status=0
python -m pytest -n "$workers" --dist loadfile -m "not serial" "$@" || status=$?
serial=0
python -m pytest -m serial "$@" || serial=$?
# 5: no test selected (e.g. scripts/test.sh tests/unit), which is not a failure of this part.
if [ "$serial" -ne 0 ] && [ "$serial" -ne 5 ]; then status=$serial; fi
if [ "$status" -eq 5 ] && [ "$serial" -eq 0 ]; then status=0; fi
exit "$status"
