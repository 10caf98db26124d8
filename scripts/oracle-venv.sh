#!/usr/bin/env bash
# Run the differential suite (tests/integration/differential: Spark's own format("kafka") next to
# format("kafka_direct") on real Kafka) on a PySpark whose Kafka connector Maven Central serves.
#
# A connector runs only on the Spark it was built for, and PySpark can reach PyPI before its
# connector reaches Central. When Central serves the installed PySpark's connector, the suite runs
# in .venv as it is. Otherwise this pins the newest PySpark whose connector Central serves, in a
# virtualenv of its own (.venv-oracle, or KAFKA_DIRECT_ORACLE_VENV), with this project's
# dependencies (".[dev]") and its src/ on the path, and runs the suite there. It says which one, and
# why, on its first line. The virtualenv is made once and re-used while it is up to date (same
# pinned version, no newer pyproject.toml, setup.py or C source).
#
#   bash scripts/oracle-venv.sh                          # the whole suite
#   bash scripts/oracle-venv.sh -n 2 --dist loadfile     # extra arguments go to pytest
#   bash scripts/oracle-venv.sh -k migration -x
#   bash scripts/oracle-venv.sh --prepare               # only make the virtualenv (test.sh does
#                                                       # this while the rest of the suite runs)
set -euo pipefail
prepare=""
if [ "${1:-}" = "--prepare" ]; then prepare=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Java for Spark, and .venv, whose PySpark decides whether a pin is needed.
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
cd "$ROOT"

say() { printf '[oracle] %s\n' "$*" >&2; }

choice="$(python -W "ignore::RuntimeWarning:runpy" -m kafka_direct.testing.spark_connector \
  --oracle-pyspark)"
pinned="${choice%%$'\n'*}"
why="${choice#*$'\n'}"
installed="$(python -c 'import pyspark; print(pyspark.__version__)')"

if [ "$pinned" = "$installed" ]; then
  say "PySpark $installed with Spark's Kafka connector $pinned, in $VENV: $why."
  if [ -n "$prepare" ]; then exit 0; fi
  exec python -m pytest tests/integration/differential "$@"
fi

OVENV="${KAFKA_DIRECT_ORACLE_VENV:-$ROOT/.venv-oracle}"
stamp="$OVENV/.kafka_direct_oracle"
changed=""
for f in "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT"/src/kafka_direct/*/_native/*.[ch] \
  "$ROOT"/src/kafka_direct/_native/*.[ch]; do
  [ "$f" -nt "$stamp" ] && changed=1
done
if [ ! -x "$OVENV/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$pinned" ] \
  || [ -n "$changed" ]; then
  start=$SECONDS
  say "Installing PySpark $pinned and kafka-direct[dev]'s dependencies into $OVENV"
  "$PY" -m venv --clear "$OVENV"
  # Not `pip install -e .`: that would compile the C extensions again and copy them over the
  # ones in src/, which the rest of the suite may have loaded at that moment (scripts/test.sh
  # makes this virtualenv while it runs). The same interpreter as .venv, so the extensions
  # scripts/setup.sh compiled in place under src/ serve both; a .pth file puts src/ on the path.
  mapfile -t deps < <("$OVENV/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for dep in project["dependencies"] + project["optional-dependencies"]["dev"]:
    if re.match(r"pyspark\b", dep) is None:
        print(dep)
PY
  )
  "$OVENV/bin/python" -m pip install -q --disable-pip-version-check "pyspark==$pinned" "${deps[@]}"
  site="$("$OVENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$ROOT/src" > "$site/kafka_direct_src.pth"
  echo "$pinned" > "$stamp"
  say "$OVENV ready in $((SECONDS - start)) s"
fi
got="$("$OVENV/bin/python" -c 'import pyspark; print(pyspark.__version__)')"
if [ "$got" != "$pinned" ]; then
  say "ERROR: $OVENV has PySpark $got, not $pinned; remove it and re-run."
  exit 1
fi
# Without a compiler the package installs anyway and reads through confluent-kafka's Python
# objects: say which read and write paths this virtualenv has, so a slower path is never silent.
"$OVENV/bin/python" - <<'EOF' >&2
from kafka_direct.consumer import native as consumer
from kafka_direct.producer import native as producer
print(f"[oracle] read path: {consumer.status()}; write path: {producer.status()}")
EOF
say "PySpark $pinned with Spark's Kafka connector $pinned, in $OVENV (not $installed as in" \
  "$VENV): $why."
# This PySpark's own class archive for the suite's Spark drivers (scripts/test.sh makes .venv's).
"$OVENV/bin/python" -m kafka_direct.testing.jvm_archive >&2 \
  || say "WARNING: no Spark driver class archive (above); the drivers start without one"
if [ -n "$prepare" ]; then exit 0; fi
export PATH="$OVENV/bin:$PATH" VIRTUAL_ENV="$OVENV"
export PYSPARK_PYTHON="$OVENV/bin/python" PYSPARK_DRIVER_PYTHON="$OVENV/bin/python"
exec "$OVENV/bin/python" -m pytest tests/integration/differential "$@"
