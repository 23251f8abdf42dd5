#!/usr/bin/env bash
# Sets up, builds and opens the desktop app (Tauri 2). Its data lives in the platform data
# directory (QUARRY_DATA_DIR overrides). Without a display, it runs the headless demo instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --locked
bash scripts/provision.sh target/debug/quarry
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
  echo "no display found: running the headless demo instead (or run this under xvfb-run)" >&2
  exec target/debug/quarry demo "$@"
fi
exec target/debug/quarry-desktop "$@"
