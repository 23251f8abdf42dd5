#!/usr/bin/env bash
# Speculative decoding, measured (tried and not kept; README, "The assistant"): llama.cpp's own
# llama-server with Qwen2.5-Coder-1.5B alone, with the 0.5B drafting for it, and with the
# prompt's n-grams drafting, on grounded prompts shaped like Quarry's. A benchmark, not a test
# (about 10 minutes on 2 cores, after a build of llama-server of about as long).
#
# The server is built from the same pinned llama-cpp-python sdist as the tests' server
# (scripts/llama-server.sh fetches it), but as Quarry builds llama.cpp: Release with AVX2, FMA,
# F16C and BMI2 (.cargo/config.toml), not the tests' -O1 baseline build.
# Needs both chat models installed: quarry models fetch qwen2.5-coder-1.5b-instruct-q4_k_m
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/llama-server.sh
VERSION=0.3.36
OUT=target/speculative
SERVER=$OUT/build/bin/llama-server
if [ ! -x "$SERVER" ]; then
  rm -rf "$OUT/src" && mkdir -p "$OUT/src"
  tar -xzf "target/llama-server/src/llama_cpp_python-$VERSION.tar.gz" -C "$OUT/src"
  cmake -S "$OUT/src/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$OUT/build" \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON \
    -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON >"$OUT/build.log" 2>&1
  cmake --build "$OUT/build" --target llama-server -j"$(nproc)" >>"$OUT/build.log" 2>&1
fi
models=${QUARRY_MODELS_DIR:-models/cache}
python3 bench/speculative/speculative.py "$SERVER" \
  "$models/qwen2.5-coder-1.5b-instruct-q4_k_m/model.gguf" \
  "$models/qwen2.5-coder-0.5b-instruct-q4_k_m/model.gguf" "$OUT"
