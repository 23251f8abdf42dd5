#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` once into target/llama-server/bin/llama-server, for the tests
# that talk to a real OpenAI-compatible server (crates/core/tests/llm_http.rs).
#
# The source is the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI: pip is the one
# registry client the build machines can reach, and the sdist is pinned by version and sha256.
# Only the server target is built, CPU only, statically linked, without TLS, without the web UI
# (which would otherwise be downloaded from Hugging Face at build time) and without -march=native
# (so the binary survives a move to another CPU), at -O1. Takes about 5 minutes of one core.
# LLAMA_SERVER_PROFILE=quarry builds it as Quarry builds llama.cpp instead (Release with AVX2,
# FMA, F16C and BMI2, see .cargo/config.toml) into target/llama-server-quarry, for benchmarks
# that compare with the embedded model (bench/speculative/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36
SDIST=llama_cpp_python-$VERSION.tar.gz
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
case "${LLAMA_SERVER_PROFILE:-tests}" in
  # -O1 rather than Release's -O3: the tests serve a 135M-parameter model, ggml's kernels are
  # hand-vectorised either way, and the build takes a core for much less of CI's time.
  tests) DEST=target/llama-server
    FLAGS=(-DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG") ;;
  quarry) DEST=target/llama-server-quarry
    FLAGS=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON) ;;
  *) echo "llama-server: LLAMA_SERVER_PROFILE is tests or quarry" >&2; exit 1 ;;
esac
BIN=$DEST/bin/llama-server
JOBS=${JOBS:-2}

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server: $BIN is already built"
  exit 0
fi
command -v cmake >/dev/null || { echo "llama-server: cmake is required (apt-get install cmake)" >&2; exit 1; }

mkdir -p "$DEST/src" "$DEST/bin"
if [ ! -f "$DEST/src/$SDIST" ] || ! echo "$SHA256  $DEST/src/$SDIST" | sha256sum -c --quiet - 2>/dev/null; then
  rm -f "$DEST/src/$SDIST"
  # The hash in the requirements file makes pip itself refuse a different file.
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  echo "llama-cpp-python==$VERSION --hash=sha256:$SHA256" >"$req"
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip download --quiet --disable-pip-version-check \
    --no-deps --no-binary=:all: --require-hashes -r "$req" -d "$DEST/src"
fi
# Checked again here: a cached file may have been replaced since.
if ! echo "$SHA256  $DEST/src/$SDIST" | sha256sum -c --quiet -; then
  echo "llama-server: $DEST/src/$SDIST does not match sha256 $SHA256" >&2
  exit 1
fi

rm -rf "$DEST/src/llama_cpp_python-$VERSION"
tar -xzf "$DEST/src/$SDIST" -C "$DEST/src"
LLAMA=$DEST/src/llama_cpp_python-$VERSION/vendor/llama.cpp
[ -f "$LLAMA/CMakeLists.txt" ] || { echo "llama-server: no vendor/llama.cpp in $SDIST" >&2; exit 1; }

start=$(date +%s)
cmake -S "$LLAMA" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release "${FLAGS[@]}" \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF >"$DEST/build.log" 2>&1 \
  && cmake --build "$DEST/build" --target llama-server -j"$JOBS" >>"$DEST/build.log" 2>&1 \
  || { tail -n 40 "$DEST/build.log" >&2; echo "llama-server: build failed, see $DEST/build.log" >&2; exit 1; }
cp "$DEST/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
"$BIN" --version
echo "llama-server: built $BIN in $(($(date +%s) - start)) s"
# The unpacked tree and objects are ~1 GB; the sdist stays for a rebuild.
rm -rf "$DEST/build" "$DEST/src/llama_cpp_python-$VERSION"
