#!/usr/bin/env bash
# Builds the desktop app's front end (Svelte 5 + Vite + TypeScript) into ui/dist, which the
# Tauri crate embeds at compile time. Packages come from the npm registry (lockfile, no
# install scripts).
set -euo pipefail
cd "$(dirname "$0")/../ui"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi
npm run --silent check
npm run --silent build
