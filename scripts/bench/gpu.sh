#!/usr/bin/env bash
# The GPU day in one command: builds the release binary with the CUDA backend
# (scripts/build-cuda.sh: the toolkit from NVIDIA's PyPI wheels unless CUDA_ROOT names one),
# runs the device tests on CUDA0 (the engine's parity tests against the committed
# fixtures, and the daemon's end-to-end tests, every graph on the device), then prints the
# benchmark tables of both families on the full-size demo models, and both families' batching
# tables.
# Usage: scripts/bench/gpu.sh [OUT_DIR=target/bench-gpu] [ARCH=90]
# Writes OUT_DIR/tests.txt, OUT_DIR/bench-{yue2,mm3,batching,batching-mm3}.{json,txt}.
# Budget: about ten minutes on one H200 with 16 cores (the ggml CUDA kernels for one
# architecture are most of the build); each step has its own timeout, and a step that fails
# is reported and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/bench-gpu}
ARCH=${2:-90}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/# /' \
  | tee "$OUT/device.txt"
ld=$(timeout 900 bash scripts/build-cuda.sh "$ARCH" | tail -n 1) || { echo "gpu.sh: the CUDA build failed" >&2; exit 1; }
eval "$ld"
# The build's environment, so the tests reuse its libraries instead of building again.
CUDA_ROOT=$(cd target/cuda-venv/lib/python3*/site-packages/nvidia/cu13 2>/dev/null && pwd || echo "${CUDA_ROOT:-}")
export CUDA_PATH="$CUDA_ROOT" CMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" CMAKE_CUDA_ARCHITECTURES="$ARCH"
export LLAMA_BUILD_SHARED_LIBS=1 GGML_CUDA_NO_VMM=ON CARGO_INCREMENTAL=0 PATH="$CUDA_ROOT/bin:$PATH"
BIN=target/cuda/release/yued
echo "## device tests on CUDA0" | tee "$OUT/tests.txt"
YUED_TEST_DEVICE=CUDA0 timeout 600 cargo test --release --target-dir target/cuda -p yued-engine -p yued-e2e \
  --features yued-engine/cuda -- --test-threads 1 2>&1 | grep -E "^test |test result|panicked" | tee -a "$OUT/tests.txt"
for fam in yue2 mm3; do
  echo "## yued bench --family $fam on CUDA0" | tee "$OUT/bench-$fam.txt"
  {
    echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F)"
    timeout 600 "$BIN" bench --family "$fam" --preset full --device CUDA0 --reps 3 --json "$OUT/bench-$fam.json"
  } 2>&1 | tee -a "$OUT/bench-$fam.txt"
done
# Many clients in one decode step (YuE2's AR half: 1, 2, 4, 8 clients against one after another).
echo "## yued bench --only batching on CUDA0" | tee "$OUT/bench-batching.txt"
timeout 600 "$BIN" bench --only batching --preset full --device CUDA0 --batching-seconds 10 \
  --json "$OUT/bench-batching.json" 2>&1 | tee -a "$OUT/bench-batching.txt"
# The same for MiniMax's AR half (frames of guided songs; 4 s songs keep it short).
echo "## yued bench --family mm3 --only batching on CUDA0" | tee "$OUT/bench-batching-mm3.txt"
timeout 600 "$BIN" bench --family mm3 --only batching --preset full --device CUDA0 --batching-seconds 4 \
  --json "$OUT/bench-batching-mm3.json" 2>&1 | tee -a "$OUT/bench-batching-mm3.txt"
