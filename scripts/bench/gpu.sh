#!/usr/bin/env bash
# The GPU table of `yued bench`: builds the release binary with the CUDA backend and runs
# every section on the full-size demo model (the published YuE2 dimensions, Q8_0) on the
# first CUDA device, side by side with llama.cpp's decode on the same GPU.
# Needs: a full CUDA toolkit (nvcc; llama-cpp-sys-2 links cudart_static, cublas_static,
# cublasLt_static and culibos on Linux: the pip CUDA wheels lack them) and the driver, plus
# what the CPU build needs
# (cmake, libclang-dev: scripts/setup-deps.sh).
# Usage: scripts/bench/gpu.sh [OUT_DIR=target/bench-gpu] [extra `yued bench` flags...]
# Writes OUT_DIR/bench-cuda.json and OUT_DIR/bench-cuda.txt (the table, with the device).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/bench-gpu}; shift || true
mkdir -p "$OUT"
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /opt/cuda/bin; do [ -x "$d/nvcc" ] && PATH="$d:$PATH"; done
fi
command -v nvcc >/dev/null || { echo "gpu.sh: nvcc not found (install the CUDA toolkit or put it on PATH)" >&2; exit 2; }
echo "CUDA: $(nvcc --version | tail -n 2 | head -n 1)" >&2
cargo build --release -p yued --features cuda >&2
{
  echo "# yued bench on $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'a CUDA device')"
  echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F)"
  target/release/yued bench --preset full --device CUDA0 --llama-cpp --json "$OUT/bench-cuda.json" "$@"
} | tee "$OUT/bench-cuda.txt"
