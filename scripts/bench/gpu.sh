#!/usr/bin/env bash
# The GPU day in one command: the device tests on CUDA0 (the engine's parity tests against the
# committed fixtures, and the daemon's end-to-end tests, every graph on the device), then both
# families' batching tables (many clients in one decode step against one after another) and
# their benchmark tables on the full-size demo models.
#
# Usage: scripts/bench/gpu.sh [OUT_DIR=target/bench-gpu] [ARCH=90-real]
#
# It runs from .gpu/yued-cuda.tar.xz, which scripts/bench/gpu-bundle.sh makes (the CUDA
# binaries, the test executables and the ggml libraries; the toolkit from NVIDIA's PyPI wheels
# unless CUDA_ROOT names one) and this script makes first when it is missing. A GPU machine with
# no Rust toolchain or no network takes the bundle along from one that has them. cuBLAS is the
# machine's own (its CUDA install, or PyTorch's nvidia wheels).
#
# Writes OUT_DIR/summary.txt (the device, the tests' verdicts, every table), OUT_DIR/tests.txt
# (the tests' whole output) and OUT_DIR/{batching-yue2,batching-mm3,bench-yue2,bench-mm3}.json.
# YUED_GPU_DEVICE (default CUDA0) names the device the tests and benchmarks run on, and
# YUED_GPU_PRESET (default full) the demo models' size (`tiny` for a dry run on a CPU).
# Time: the whole run keeps inside YUED_GPU_BUDGET seconds (default 540) after the build, the
# tests inside YUED_GPU_TEST_BUDGET of them (200); each step gets what is left, up to its own
# share, and a step that fails or runs out of time is reported and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-target/bench-gpu}
ARCH=${2:-90-real}
mkdir -p "$OUT"
S="$OUT/summary.txt"
: >"$S"
say() { echo "$*" | tee -a "$S"; }
say "# yued on a GPU, $(date -u '+%F %T') UTC"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/# /' | tee -a "$S"

if [ ! -f .gpu/yued-cuda.tar.xz ]; then
  timeout 1500 bash scripts/bench/gpu-bundle.sh "$ARCH" || { say "gpu.sh: the CUDA build failed"; exit 1; }
fi
R=target/gpu-run
rm -rf "$R" && mkdir -p "$R"
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu/yued-cuda.tar.xz "$R" ||
  { say "gpu.sh: could not unpack .gpu/yued-cuda.tar.xz"; exit 1; }
say "# bundle of $(tr '\n' ' ' <"$R/commit.txt"), $(cat "$R/cuda.txt")"
head=$(git rev-parse --short HEAD 2>/dev/null) && [ "$head" != "$(head -1 "$R/commit.txt")" ] &&
  say "# (this checkout is $head: rebuild with scripts/bench/gpu-bundle.sh to test it)"
# The tests find the committed fixtures under the path the bundle was built at.
root=$(cat "$R/root.txt")
if [ ! -e "$root" ]; then mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; fi
mkdir -p .cache && { [ -f .cache/qwen.tiktoken ] || cp .gpu/qwen.tiktoken .cache/; }
export YUED_QWEN_TIKTOKEN=$PWD/.gpu/qwen.tiktoken
# cuBLAS of this machine: its CUDA toolkit, or the nvidia wheels beside PyTorch.
sites=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
blas=$(for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
  $(for p in $sites; do echo "$p"/nvidia/*/lib "$p"/nvidia/*/*/lib; done); do
  [ -e "$d/libcublas.so.13" ] && echo "$d"; done | head -1)
[ -n "$blas" ] || blas=$(dirname "$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)")
say "# cuBLAS from $blas"
export LD_LIBRARY_PATH="$PWD/$R/lib:$blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN=$R/bin/yued
missing=$(ldd "$BIN" "$R"/lib/libggml-cuda.so 2>&1 | grep "not found" | sort -u)
[ -z "$missing" ] || { say "gpu.sh: libraries not found: $missing"; exit 1; }
# Songs batched against alone on the device first (where a device's kernels part them, the
# stages tests say where and by how much), then the engine's parity tests, then the daemon's,
# the ones that render on the device first.
TESTS=()
shopt -s nullglob
for n in stages yued_engine vae listen transcribe deep adapters daemon client tenancy; do
  TESTS+=("$R"/bin/deps/"$n"-*)
done

DEV=${YUED_GPU_DEVICE:-CUDA0}
BUDGET=${YUED_GPU_BUDGET:-540}
t0=$SECONDS
# Seconds for the next step: its share, or what is left of the budget if less.
share() { local l=$((BUDGET - (SECONDS - t0))) w=$1; [ "$l" -lt "$w" ] && w=$l; echo $((w > 5 ? w : 5)); }
CACHE=target/bench-models
P=${YUED_GPU_PRESET:-full}
# The demo models are written (once, on the CPU) while the tests run; a folder is renamed into
# place when its files are whole, so a bench never reads a half-written one.
gen() {  # gen FAMILY FOLDER
  [ -d "$CACHE/$2" ] && return
  rm -rf "$CACHE/$2.part"
  timeout "$BUDGET" "$BIN" demo-model --family "$1" --preset "$P" --out "$CACHE/$2.part" >/dev/null 2>&1 &&
    mv "$CACHE/$2.part" "$CACHE/$2"
}
gen yue2 "$P" &
gen1=$!
gen mm3 "mm3-$P" &
gen2=$!

say "## device tests on $DEV"
export YUED_TEST_DEVICE=$DEV
: >"$OUT/tests.txt"
# The tests have TEST_BUDGET seconds of the budget, so the tables still get theirs.
TEST_BUDGET=${YUED_GPU_TEST_BUDGET:-200}
left=${#TESTS[@]}
for t in "${TESTS[@]}"; do
  name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
  # The stages tests may take 35% of what the tests have, the engine's suite 60% of what is
  # left then; each later binary an even part.
  rem=$((TEST_BUDGET - (SECONDS - t0)))
  case $name in
    stages) s=$(share $((rem * 35 / 100))) ;;
    yued_engine) s=$(share $((rem * 6 / 10))) ;;
    *) s=$(share $((rem / left))) ;;
  esac
  left=$((left - 1))
  timeout "$s" "$t" --test-threads 4 >"$OUT/t.log" 2>&1
  rc=$?
  sed "s/^/$name: /" "$OUT/t.log" >>"$OUT/tests.txt"
  verdict=$(grep -E "^test result" "$OUT/t.log" | tail -1)
  [ "$rc" = 124 ] && verdict="stopped after ${s}s ($(grep -c ' \.\.\. ok$' "$OUT/t.log") passed by then)"
  say "$name: ${verdict:-exit $rc}"
  grep -E "^test .* FAILED$|^---- .* stdout ----$" "$OUT/t.log" | sed 's/^/    /' | head -20 | tee -a "$S"
done
rm -f "$OUT/t.log"
unset YUED_TEST_DEVICE

wait $gen1 $gen2
bench() {  # bench NAME SHARE ARGS...
  local name=$1 s
  s=$(share "$2")
  shift 2
  say "## yued bench $* (up to ${s}s)"
  timeout "$s" "$BIN" bench --device "$DEV" --cache "$CACHE" --json "$OUT/$name.json" "$@" 2>&1 | grep -v '^\s*$' |
    tee -a "$S" | tail -n 40
  [ "${PIPESTATUS[0]}" = 124 ] && say "(stopped after ${s}s)"
}
# Many clients in one decode step: YuE2's AR half and MiniMax's, 1, 2, 4 and 8 clients.
bench batching-yue2 90 --only batching --preset "$P" --batching-seconds 10
bench batching-mm3 90 --family mm3 --only batching --preset "$P" --batching-seconds 4
bench bench-yue2 120 --preset "$P" --only mem,prefill,decode,nar,vae,e2e --quick --reps 3 --e2e-seconds 30
bench bench-mm3 120 --family mm3 --preset "$P" --only frame,lm,dit,vae,e2e --quick --reps 3
say "# done in $((SECONDS - t0)) s after the build"
