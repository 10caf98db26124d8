#!/usr/bin/env bash
# Build kafka-direct's release artifacts: the sdist and a manylinux wheel.
#
#   bash scripts/package.sh            # into dist/
#   bash scripts/package.sh OUT_DIR
#
# The wheel is built from the sdist in an isolated environment (python -m build), so what the
# sdist lacks the wheel lacks too, then retagged by auditwheel with the manylinux policy its C
# extensions satisfy. They link only the C library (libdl, libpthread): librdkafka is loaded at
# run time from the copy confluent-kafka ships, so nothing is bundled. Nothing is uploaded.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
say() { printf '[package] %s\n' "$*" >&2; }

raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
rm -f "$OUT"/kafka_direct-*.whl "$OUT"/kafka_direct-*.tar.gz
say "Building the sdist and the wheel (python -m build)"
python -m build --sdist --wheel --outdir "$raw" "$ROOT" > "$raw/build.log" 2>&1 || {
  tail -40 "$raw/build.log" >&2; say "ERROR: the build failed (above)"; exit 1; }
cp "$raw"/kafka_direct-*.tar.gz "$OUT"/
wheel="$(ls "$raw"/kafka_direct-*.whl)"
# Every extension must be in the wheel: a compiler that failed quietly would ship a wheel
# without its fast paths (setup.py marks them optional, for the sdist's sake).
listing="$(python -m zipfile -l "$wheel")"
for ext in consumer/_rdkafka_arrow producer/_rdkafka_produce schema_registry/_avro_arrow \
  schema_registry/_avro_encode schema_registry/_protobuf_arrow; do
  if ! grep -q "kafka_direct/$ext\.cpython-.*\.so" <<< "$listing"; then
    say "ERROR: the wheel has no kafka_direct/$ext extension (see $raw/build.log)"; exit 1
  fi
done
say "Repairing the wheel into a manylinux tag (auditwheel)"
auditwheel repair -w "$OUT" "$wheel" > "$raw/auditwheel.log" 2>&1 || {
  cat "$raw/auditwheel.log" >&2; say "ERROR: auditwheel repair failed"; exit 1; }
say "Built:"
for f in "$OUT"/kafka_direct-*; do
  say "  $(basename "$f") ($(du -k "$f" | cut -f1) KB)"
done
