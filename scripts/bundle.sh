#!/usr/bin/env bash
# Builds the desktop app's deb and rpm packages offline: the front end, the workspace (release,
# or debug with --debug), then `tauri bundle` from the npm Tauri CLI. AppImage is not built: its
# tooling downloads at build time.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--release)
flags=()
if [ "${1:-}" = "--debug" ]; then
  profile=()
  flags=(--debug)
fi
bash scripts/ui.sh
cargo build --workspace --locked "${profile[@]}"
cd src-tauri
../ui/node_modules/.bin/tauri bundle "${flags[@]}" --bundles deb,rpm
