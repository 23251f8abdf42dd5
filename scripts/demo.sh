#!/usr/bin/env bash
# Sets up, builds and runs the headless main job: fetch the pinned runtime and model, index the
# demo corpus (full text, then embeddings) and run lexical and hybrid searches on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --locked -q -p quarry-cli
bash scripts/provision.sh target/debug/quarry
target/debug/quarry demo "$@"
