#!/usr/bin/env bash
# Builds yued with the CUDA backend on a machine without a GPU or a CUDA install: the toolkit is
# assembled from NVIDIA's PyPI wheels (scripts/cuda-env.sh says which and why), for one
# architecture to bound the build.
#
# Usage: scripts/build-cuda.sh [ARCH=90-real] [extra cargo flags...]
#   ARCH is the CUDA architecture (90: H100/H200); the binary is target/cuda/release/yued.
# Environment: YUED_CUDA_VENV (default target/cuda-venv) holds the wheels; a toolkit already
# on the machine can be used instead with CUDA_ROOT=/usr/local/cuda.
#
# ggml is built as shared libraries: the script prints the LD_LIBRARY_PATH the binary needs
# (scripts/bench/gpu.sh sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:-90-real}; shift || true
. scripts/cuda-env.sh "$ARCH"
cuda_prepare target/cuda
cargo build --release -p yued --features cuda --target-dir target/cuda --message-format=json-render-diagnostics \
  "$@" >target/cuda/build.json
echo "build-cuda.sh: built target/cuda/release/yued; run it with" >&2
libs=$(cuda_ggml_libs target/cuda/build.json)
echo "export LD_LIBRARY_PATH=$libs:$CUDA_ROOT/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
