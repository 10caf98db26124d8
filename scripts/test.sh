#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: unit tests, then integration tests
# against the embedded broker (or KAFKA_BOOTSTRAP_SERVERS) and a local Spark. Extra arguments go
# to pytest, e.g. scripts/test.sh tests/unit -k options
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$ROOT/scripts/setup.sh"
cd "$ROOT"
ruff check .
mypy
exec python -m pytest "$@"
