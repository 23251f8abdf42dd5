#!/usr/bin/env bash
# Sets up and runs every check CI runs: formatting, lints, and all tests (unit, integration,
# crash and watcher tests, doctests) against real SQLite files and tantivy directories.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
