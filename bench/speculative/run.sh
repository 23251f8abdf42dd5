#!/usr/bin/env bash
# Speculative decoding, measured (tried and not kept; README, "The assistant"): llama.cpp's own
# llama-server with Qwen2.5-Coder-1.5B alone, with the 0.5B drafting for it, and with the
# prompt's n-grams drafting, on grounded prompts shaped like Quarry's. A benchmark, not a test
# (about 10 minutes on 2 cores, after a build of llama-server of about as long).
#
# The server is built by scripts/llama-server.sh from the same pinned sdist as the tests' server,
# but as Quarry builds llama.cpp (LLAMA_SERVER_PROFILE=quarry), not the tests' -O1 build.
# Needs both chat models installed: quarry models fetch qwen2.5-coder-1.5b-instruct-q4_k_m
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_SERVER_PROFILE=quarry JOBS="$(nproc)" bash scripts/llama-server.sh
SERVER=target/llama-server-quarry/bin/llama-server
OUT=target/speculative
mkdir -p "$OUT"
models=${QUARRY_MODELS_DIR:-models/cache}
python3 bench/speculative/speculative.py "$SERVER" \
  "$models/qwen2.5-coder-1.5b-instruct-q4_k_m/model.gguf" \
  "$models/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf" "$OUT"
