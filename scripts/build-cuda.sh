#!/usr/bin/env bash
# Builds yued with the CUDA backend on a machine without a GPU or a CUDA install: the
# toolkit is assembled from NVIDIA's PyPI wheels (CUDA 13: nvcc, cicc/nvvm, the crt and
# runtime headers, cudart, cuBLAS, CCCL), for one architecture to bound the build.
#
# Usage: scripts/build-cuda.sh [ARCH=90] [extra cargo flags...]
#   ARCH is the CUDA architecture (90: H100/H200); the binary is target/cuda/release/yued.
# Environment: YUED_CUDA_VENV (default target/cuda-venv) holds the wheels; a toolkit already
# on the machine can be used instead with CUDA_ROOT=/usr/local/cuda.
#
# How it links: the pip wheels ship cuBLAS only as shared libraries, so ggml is built as
# shared libraries (LLAMA_BUILD_SHARED_LIBS=1) that link cudart and cuBLAS dynamically, and
# without the CUDA driver's virtual-memory pool (GGML_CUDA_NO_VMM=ON: the wheels have no
# libcuda stub to link at build time; the driver is still loaded at run time). The script
# prints the LD_LIBRARY_PATH the binary needs; scripts/bench/gpu.sh sets it.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:-90}; shift || true
VENV=${YUED_CUDA_VENV:-target/cuda-venv}
if [ -z "${CUDA_ROOT:-}" ]; then
  if [ ! -x "$VENV/bin/pip" ]; then python3 -m venv "$VENV"; fi
  # Pinned: the versions this script was last run with.
  "$VENV/bin/pip" install -q --no-deps \
    nvidia-cuda-nvcc==13.5.37 nvidia-nvvm==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-cuda-runtime==13.5.37 \
    nvidia-cublas==13.10.0.20 nvidia-cuda-cccl==13.3.5.0.6 cmake==3.31.6
  CUDA_ROOT=$(cd "$VENV"/lib/python3*/site-packages/nvidia/cu13 && pwd)
  export PATH="$(cd "$VENV/bin" && pwd):$PATH"   # this cmake (CUDA 13 support) first
  # Link-time names for the versioned libraries of the wheels.
  for l in "$CUDA_ROOT"/lib/lib*.so.*; do
    base=${l%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$l")" "$base"
  done
  # CCCL (cub, thrust, libcu++) where nvcc looks for the toolkit's headers.
  if [ -d "$CUDA_ROOT/cccl/include" ]; then
    for d in "$CUDA_ROOT"/cccl/include/*; do
      [ -e "$CUDA_ROOT/include/$(basename "$d")" ] || ln -s "$d" "$CUDA_ROOT/include/$(basename "$d")"
    done
  fi
fi
[ -x "$CUDA_ROOT/bin/nvcc" ] || { echo "build-cuda.sh: no nvcc under $CUDA_ROOT" >&2; exit 2; }
echo "build-cuda.sh: $("$CUDA_ROOT/bin/nvcc" --version | grep -m1 release), sm_$ARCH, $(cmake --version | head -1)" >&2
export CUDA_PATH="$CUDA_ROOT" CUDAToolkit_ROOT="$CUDA_ROOT"
export PATH="$CUDA_ROOT/bin:$PATH"
export CMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" CMAKE_CUDA_ARCHITECTURES="$ARCH"
export LLAMA_BUILD_SHARED_LIBS=1 GGML_CUDA_NO_VMM=ON
export CARGO_INCREMENTAL=0
cargo build --release -p yued --features cuda --target-dir target/cuda "$@"
# Where the shared ggml libraries landed, for the loader.
GGML_LIBS=$(dirname "$(find target/cuda/release/build -name 'libggml-cuda.so*' -print -quit)")
echo "build-cuda.sh: built target/cuda/release/yued; run it with" >&2
echo "export LD_LIBRARY_PATH=$(pwd)/$GGML_LIBS:$CUDA_ROOT/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
