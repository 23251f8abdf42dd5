#!/usr/bin/env bash
# Sets up, builds and runs the headless main job: index the demo corpus and search it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --locked -q -p quarry-cli -- demo "$@"
