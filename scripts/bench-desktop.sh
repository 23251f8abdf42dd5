#!/usr/bin/env bash
# Prints the desktop app's figures (start-up, search latency as seen in the window, memory),
# measured in the running app under Xvfb on the demo corpus. Expects the workspace built and
# the models provisioned. ROUNDS=N sets the searches per mode (default 20).
# `scale` instead measures the window while a large tree is indexed and embedded (TREE=DIR,
# default the toolchain's HTML documentation; MINUTES=N, default 12): e2e/bench-scale.mjs.
set -euo pipefail
cd "$(dirname "$0")/../e2e"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
script=bench.mjs
[ "${1:-}" = scale ] && script=bench-scale.mjs
xvfb-run -a -s "-screen 0 1440x900x24" node "$script"
