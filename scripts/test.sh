#!/usr/bin/env bash
# Sets up and runs every check CI runs: formatting, lints, and all tests (unit, integration,
# crash, watcher, semantic-search, rerank, download and Cranfield eval tests, the assistant with
# the embedded models (Qwen2.5-Coder-0.5B, SmolLM2) and a real llama-server, doctests, the
# front end's unit tests (vitest), and the desktop app end to end in a real WebKit window)
# against real SQLite files, tantivy directories, ONNX Runtime and the MiniLM model.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage says when it starts, so a slow CI run shows where its time went.
stage() { echo "== test.sh: $* (at ${SECONDS} s)" >&2; }
stage setup
bash scripts/setup.sh
cargo fmt --all --check
# The front end's own logic (Markdown rendering, formatting, timing, stores) under vitest;
# setup.sh has installed ui/node_modules from the lockfile.
stage "UI unit tests"
(cd ui && npm run --silent test)

# llama.cpp's llama-server (for the HTTP backend tests against a real OpenAI-compatible
# server) is built once from the pinned PyPI sdist, about 5 minutes of one core, cached in
# target/. It builds on one core in the background while cargo builds.
mkdir -p target
JOBS=1 bash scripts/llama-server.sh >target/llama-server.log 2>&1 &
llama_server=$!

# Clippy lints the workspace crates while they are compiled for the tests (clippy-driver wraps
# rustc for workspace members only), so the dependencies are compiled once rather than a
# second time in check mode, as a separate `cargo clippy --all-targets` would. CLIPPY_ARGS is
# how cargo-clippy hands its arguments to clippy-driver.
# One `build --all-targets` builds the binaries and the tests with the same features (the
# dev-dependencies' included), so the dependency graph is compiled once: a plain `build`
# followed by `test` compiles several dependencies twice, with and without those features.
stage "build and lint"
if clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver); then
  export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  cargo build --workspace --all-targets --locked
else
  cargo build --workspace --all-targets --locked
  cargo clippy --workspace --all-targets --locked -- -D warnings
fi

stage "provision models"
bash scripts/provision.sh target/debug/quarry
# The rerank tests build a small cross-encoder with the `onnx` package.
if [ ! -d target/pydeps/onnx ]; then
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
    --target target/pydeps onnx==1.23.2
fi
# The GPU fallback test loads ONNX Runtime with its CUDA execution provider (the pinned
# onnxruntime-gpu wheel, without NVIDIA's libraries), which must then fall back to the CPU.
bash scripts/ort-cuda-for-tests.sh target/ort-cuda
# The MCP tests drive `quarry mcp` with the official MCP Python SDK, a real client.
if [ ! -d target/pydeps-mcp/mcp ]; then
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
    --target target/pydeps-mcp mcp==1.30.0
fi
stage "wait for llama-server"
if ! wait "$llama_server"; then
  cat target/llama-server.log >&2
  exit 1
fi
tail -n 1 target/llama-server.log
stage tests
cargo test --workspace --locked
# The desktop app end to end, in a real WebKit window under Xvfb.
stage "desktop end to end"
bash scripts/e2e.sh
stage done
