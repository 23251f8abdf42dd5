#!/usr/bin/env bash
# Textbook BM25 beside Quarry on a BEIR set whose documents Quarry extracts (the long pages):
# Quarry writes the text it indexed, then bm25s ranks it outside Quarry. A benchmark, not a
# test; needs PyPI for the pinned packages.
#
# usage: bench/bm25/run.sh [SET]   (default: tests/data/rust-docs-qa)
#   QUARRY  the quarry binary (default: target/release/quarry)
#   VENV    the virtual environment (default: /tmp/bm25-venv)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SET=${1:-$ROOT/tests/data/rust-docs-qa}
QUARRY=${QUARRY:-$ROOT/target/release/quarry}
VENV=${VENV:-/tmp/bm25-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.lock"
fi
OUT=$(mktemp -d /tmp/quarry-bm25.XXXX)
"$QUARRY" eval --beir "$SET" --mode lexical --export-corpus "$OUT/corpus.jsonl" >/dev/null
"$VENV/bin/python" "$HERE/bm25_textbook.py" "$SET" "$OUT/corpus.jsonl"
