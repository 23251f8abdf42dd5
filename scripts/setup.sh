#!/usr/bin/env bash
# Installs what Quarry needs to build and test on Debian. Idempotent: installs only what is
# missing, and never downloads anything outside the package registries.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v setpriv >/dev/null 2>&1 || need_apt+=(util-linux)
command -v mkfifo >/dev/null 2>&1 || need_apt+=(coreutils)
command -v git >/dev/null 2>&1 || need_apt+=(git)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: no Rust toolchain (cargo) found; install Rust 1.89 or newer (https://rustup.rs) and re-run" >&2
  exit 1
fi
# clippy and rustfmt ship with rustup's default profile; add them where rustup can.
for component in clippy rustfmt; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component" || echo "warning: could not add $component" >&2
  fi
done
