#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: the streaming word count on an embedded broker,
# fed by a sample producer, printing counts per micro-batch and stopping by itself.
# Options go to `kafka-direct wordcount`, e.g. scripts/wordcount.sh --seconds 30
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_DIRECT_SETUP_STRICT=1 . "$ROOT/scripts/setup.sh"
exec kafka-direct wordcount "$@"
