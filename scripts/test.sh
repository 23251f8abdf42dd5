#!/usr/bin/env bash
# Sets up and runs every check CI runs: formatting, lints, and all tests (unit, integration,
# crash, watcher, semantic-search, rerank, download and Cranfield eval tests, the assistant with
# the embedded SmolLM2 model and a real llama-server, doctests, and the desktop app end to end
# in a real WebKit window)
# against real SQLite files, tantivy directories, ONNX Runtime and the MiniLM model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all --check
cargo build --workspace --locked
bash scripts/provision.sh target/debug/quarry
# The rerank tests build a small cross-encoder with the `onnx` package.
if [ ! -d target/pydeps/onnx ]; then
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
    --target target/pydeps onnx==1.23.2
fi
# The HTTP backend tests talk to a real OpenAI-compatible server: llama.cpp's llama-server,
# built once from the pinned PyPI sdist (about 10 minutes on 2 cores; cached in target/).
bash scripts/llama-server.sh
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The desktop app end to end, in a real WebKit window under Xvfb.
bash scripts/e2e.sh
