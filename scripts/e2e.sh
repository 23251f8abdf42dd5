#!/usr/bin/env bash
# Runs the desktop app's end-to-end tests: the real app in a real WebKit window under Xvfb,
# driven over WebDriver (tauri-driver + WebKitWebDriver, webdriverio + node:test).
# Expects the workspace built (cargo build --workspace) and the models provisioned.
set -euo pipefail
cd "$(dirname "$0")/../e2e"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
xvfb-run -a -s "-screen 0 1440x900x24" npm test
