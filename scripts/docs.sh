#!/usr/bin/env bash
# The docs site (mkdocs.yml, docs/): "scripts/docs.sh build" builds it into site/ with --strict,
# so a broken link, a missing page or anchor, or a docstring mkdocstrings cannot render fails;
# "scripts/docs.sh serve" previews it at http://127.0.0.1:8000 (extra arguments go to mkdocs).
# Needs the dev extra (mkdocs, mkdocs-material, mkdocstrings[python]): scripts/setup.sh.
set -euo pipefail
export NO_MKDOCS_2_WARNING=1  # Material's end-of-life notice, printed on every build
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON=python
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; fi
command="${1:-build}"
shift || true
case "$command" in
  build) exec "$PYTHON" -m mkdocs build --strict --clean "$@" ;;
  serve) exec "$PYTHON" -m mkdocs serve --dev-addr 127.0.0.1:8000 "$@" ;;
  *) echo "usage: scripts/docs.sh build|serve [mkdocs options]" >&2; exit 2 ;;
esac
