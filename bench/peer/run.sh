#!/usr/bin/env bash
# Quarry beside the stack a user would otherwise pick (ChromaDB + the same MiniLM int8 model in
# Python), on the same files, then the ratio table. A benchmark, never run by CI.
#
# usage: bench/peer/run.sh [MAX_CHUNKS]
#   MAX_CHUNKS  stop adding whole files once the peer's passages would exceed it (0: all 622
#               files of the toolchain's Reference, Book and Cargo Book, about 10 minutes of
#               the peer's embedding on 2 cores, and as long again for Quarry)
#   QUARRY      the quarry binary (default: target/release/quarry, built when missing)
#   OUT         where the figures go (default: a new /tmp/quarry-peer.* folder)
# Run it on an otherwise idle machine: both sides use every core.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MAX_CHUNKS=${1:-0}
OUT=${OUT:-$(mktemp -d /tmp/quarry-peer.XXXX)}
mkdir -p "$OUT"

bash "$HERE/setup.sh"
PY=${VENV:-/tmp/peer-venv}/bin/python
QUARRY=${QUARRY:-$ROOT/target/release/quarry}
if [ ! -x "$QUARRY" ]; then
  (cd "$ROOT" && cargo build --release --locked -p quarry-cli)
fi
# The pinned runtime and model, where binaries built in this checkout find them.
bash "$ROOT/scripts/provision.sh" "$QUARRY" >/dev/null

H=$(rustc --print sysroot)/share/doc/rust/html
echo "[peer] indexing (figures in $OUT)" >&2
"$PY" "$HERE/peer_index.py" "$H/reference" "$H/book" "$H/cargo" "$OUT/peer-db" --overwrite \
  --max-chunks "$MAX_CHUNKS" --manifest "$OUT/manifest.txt" --json "$OUT/peer-index.json" >&2
"$PY" "$HERE/peer_query.py" "$OUT/peer-db" "$HERE/queries.txt" --json "$OUT/peer-query.json" >&2
echo "[quarry] indexing the same $(wc -l <"$OUT/manifest.txt") files" >&2
python3 "$HERE/quarry_side.py" "$QUARRY" "$OUT/manifest.txt" --json "$OUT/quarry.json" >/dev/null
python3 "$HERE/compare.py" "$OUT/peer-index.json" "$OUT/peer-query.json" "$OUT/quarry.json" \
  | tee "$OUT/table.md"
