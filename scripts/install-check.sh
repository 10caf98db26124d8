#!/usr/bin/env bash
# Install kafka-direct as a user does, into fresh virtualenvs outside the checkout, and run the
# smoke set (scripts/install_smoke.py) against real Kafka and a local Spark. Run by the suite
# (tests/integration/test_install.py); alone:
#
#   bash scripts/install-check.sh                 # starts its own Kafka broker
#   KAFKA_BOOTSTRAP_SERVERS=host:9092 bash scripts/install-check.sh
#
# 1. The README's install lines (the block after "<!-- install-lines -->"), run as written in the
#    checkout with a fresh virtualenv first on the PATH: they build dist/ (scripts/package.sh)
#    and install the wheel. The smoke set then runs in that virtualenv, from a directory outside
#    the checkout, and requires the C fast paths.
# 2. The sdist from dist/, installed into another fresh virtualenv where no C compiler is on the
#    PATH (and CC is unset): it must install, read and write through the Python path, and say
#    in one line that the fast path is off and why.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
say() { printf '[install-check] %s\n' "$*" >&2; }

base="$("$VENV/bin/python" -c 'import sys; print(sys._base_executable)')"
work="$(mktemp -d "${TMPDIR:-/tmp}/kafka-direct-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

# -- 1. the README's lines, then the wheel's smoke set -----------------------------------------
lines="$(awk '/<!-- install-lines/ {found=1; next}
  found && /^```/ {if (inblock) exit; inblock=1; next}
  inblock {print}' "$ROOT/README.md")"
[ -n "$lines" ] || { say "ERROR: README.md has no install block after <!-- install-lines -->"; exit 1; }
"$base" -m venv "$work/wheel"
while IFS= read -r line; do
  command="${line%%#*}"
  [ -n "${command// /}" ] || continue
  say "README: $command"
  (cd "$ROOT" && PATH="$work/wheel/bin:$PATH" VIRTUAL_ENV="$work/wheel" bash -euo pipefail -c "$command")
done <<< "$lines"
wheel="$(ls "$ROOT"/dist/kafka_direct-*manylinux*.whl)"
sdist="$(ls "$ROOT"/dist/kafka_direct-*.tar.gz)"
say "Smoke set of the wheel $(basename "$wheel")"
(cd "$work" && PYSPARK_PYTHON="$work/wheel/bin/python" PYSPARK_DRIVER_PYTHON="$work/wheel/bin/python" \
  "$work/wheel/bin/python" "$ROOT/scripts/install_smoke.py" --expect-fast-path yes --checkout "$ROOT")

# -- 2. the sdist on a machine without a C compiler --------------------------------------------
# A PATH of every command but the C compilers.
nocc="$work/nocc-bin"
mkdir -p "$nocc"
for dir in /usr/local/bin /usr/bin /bin; do
  for tool in "$dir"/*; do
    name="$(basename "$tool")"
    case "$name" in
      cc|c89|c99|gcc|gcc-*|*-gcc|*-gcc-*|clang|clang-*|tcc|x86_64-linux-gnu-*|aarch64-linux-gnu-*) continue ;;
    esac
    [ -e "$nocc/$name" ] || ln -s "$tool" "$nocc/$name"
  done
done
if PATH="$nocc" command -v cc gcc >/dev/null 2>&1; then say "ERROR: a compiler is still on the PATH"; exit 1; fi
"$base" -m venv "$work/sdist"
say "Installing the sdist $(basename "$sdist") without a C compiler"
(cd "$work" && env -u CC PATH="$work/sdist/bin:$nocc" "$work/sdist/bin/pip" install -q "$sdist")
say "Smoke set of the sdist, Python path"
(cd "$work" && env -u CC PATH="$work/sdist/bin:$nocc" PYSPARK_PYTHON="$work/sdist/bin/python" \
  PYSPARK_DRIVER_PYTHON="$work/sdist/bin/python" \
  "$work/sdist/bin/python" "$ROOT/scripts/install_smoke.py" --expect-fast-path no --checkout "$ROOT")
say "Both artifacts installed and passed the smoke set"
