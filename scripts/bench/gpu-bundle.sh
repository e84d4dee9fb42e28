#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything scripts/bench/gpu.sh runs on a GPU machine that
# has no Rust toolchain and no network (the machines this project is lent: a CUDA image, nothing
# to fetch, a 64 MiB working tree): the release `yued` and `yue` with the CUDA backend (and the
# fault hooks the end-to-end tests use), the device tests' executables, the shared ggml
# libraries, cudart and libgomp, stripped, in one xz archive beside the Qwen ranks file. cuBLAS (hundreds
# of MB) is taken from the GPU machine's own CUDA install.
#
# Usage: scripts/bench/gpu-bundle.sh [ARCH=90-real]
# Writes .gpu/yued-cuda.tar.xz and .gpu/qwen.tiktoken (ignored by git). On the GPU machine:
#   bash scripts/bench/gpu.sh OUT_DIR      # finds .gpu/ and runs from it (carry `.gpu`)
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH=${1:-90-real}
. scripts/cuda-env.sh "$ARCH"
T=target/cuda
cuda_prepare $T
# One cargo command: the binaries and the tests in one resolution of the features, so ggml is
# built once (a second resolution of the build dependencies' features builds it again).
# The device tests: the engine's (parity against the committed fixtures) and the daemon's
# end-to-end binaries that render on the device (not those of the browser, the SDKs, the cluster
# or the repository layout, which do not touch a device and need tools the GPU machine lacks).
E2E="stages daemon deep vae listen transcribe adapters tenancy client"
cargo test --release --locked --no-run --target-dir $T -p yued -p yue-client -p yued-engine -p yued-e2e \
  --features yued/cuda,yued-actors/test-faults,yued-engine/cuda --message-format=json-render-diagnostics \
  >$T/tests.json
stage=$T/gpu-bundle
rm -rf "$stage"
mkdir -p "$stage/bin/deps" "$stage/lib"
# The test executables.
python3 - "$T/tests.json" "$stage/bin/deps" $E2E <<'PY'
import json, shutil, sys
out, keep = sys.argv[2], set(sys.argv[3:])
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    if (m["package_id"].find("yued-engine") >= 0 and t["kind"] == ["lib"]) or t["name"] in keep:
        shutil.copy(m["executable"], out)
        print("gpu-bundle: test", t["name"], file=sys.stderr)
PY
cp $T/release/yued $T/release/yue "$stage/bin/"
cp -P "$(cuda_ggml_libs $T/tests.json)"/lib*.so* "$stage/lib/"
cp -P "$CUDA_ROOT"/lib/libcudart.so.13* "$stage/lib/"
# ggml's CPU backend waits at its barriers in OpenMP: libgomp goes along (a CUDA image may lack it).
cp -L "$(gcc -print-file-name=libgomp.so.1)" "$stage/lib/"
strip --strip-unneeded "$stage"/bin/yued "$stage"/bin/yue "$stage"/bin/deps/* "$stage"/lib/*.so* 2>/dev/null || true
echo "$PWD" >"$stage/root.txt"
{ git rev-parse --short HEAD; git status --short | grep -q . && echo "(with uncommitted changes)"; } \
  >"$stage/commit.txt" || true
echo "CUDA architectures $ARCH, $(nvcc --version | grep -m1 release)" >"$stage/cuda.txt"
mkdir -p .gpu
# One stream with a large dictionary: the test executables share most of their code.
tar -C "$stage" -cf - . | xz -T1 --lzma2=preset=9,dict=256MiB >.gpu/yued-cuda.tar.xz
cp "$(bash scripts/fetch-qwen-tiktoken.sh)" .gpu/qwen.tiktoken
du -b .gpu/* | sed 's/^/gpu-bundle: /'
total=$(( $(du -cb .gpu/* | tail -1 | cut -f1) + $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) ))
echo "gpu-bundle: with the working tree, $((total / 1048576)) MiB travel (the device tool's limit: 64 MiB)"
[ "$total" -lt $((64 * 1048576)) ] || echo "gpu-bundle: warning: more than the device tool carries" >&2
