#!/usr/bin/env bash
# Runs the desktop app under Xvfb on the demo corpus and captures each view into
# docs/screenshots/ (shown in the README). Expects the workspace built and models provisioned.
set -euo pipefail
cd "$(dirname "$0")/../e2e"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
xvfb-run -a -s "-screen 0 1440x900x24" node screenshots.mjs
