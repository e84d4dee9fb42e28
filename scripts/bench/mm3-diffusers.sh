#!/usr/bin/env bash
# MiniMax Music 3's DiT step and vocoder decode next to diffusers (torch on the CPU), on the
# same weights and thread count: random weights written by diffusers' own classes
# (save_pretrained, the published layout), converted by `yued convert mm3`, then timed by
# both. torch is installed into a venv for this benchmark only (never by the test suite).
#
# Usage: scripts/bench/mm3-diffusers.sh [PRESET=mid] [OUT_DIR=target/bench-mm3-diffusers]
#   PRESET: tiny (the test fixture's widths), mid (published widths, 4 of the 36 DiT blocks),
#           full (the published configuration: ~10 GB of float32 DiT, written twice).
#   env: THREADS (default 1), REPS (default 3), MM3_BENCH_VENV (default ~/.cache/yued/mm3-bench-venv).
# Writes OUT_DIR/{ckpt,gguf}/, torch.json, yued.json and table.txt (printed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PRESET=${1:-mid}
OUT=${2:-target/bench-mm3-diffusers}/$PRESET
THREADS=${THREADS:-1}
REPS=${REPS:-3}
VENV=${MM3_BENCH_VENV:-$HOME/.cache/yued/mm3-bench-venv}
mkdir -p "$OUT"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, diffusers" 2>/dev/null; then
  echo "installing torch and diffusers into $VENV (once; ~3 GB)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch "diffusers>=0.40" transformers safetensors numpy
fi
PY="$VENV/bin/python"
cargo build --release -p yued >&2
YUED=target/release/yued
"$PY" scripts/bench/mm3_diffusers.py write --preset "$PRESET" --dir "$OUT/ckpt" >&2
[ -d "$OUT/gguf" ] || "$YUED" convert mm3 "$OUT/ckpt" "$OUT/gguf" >&2
"$PY" scripts/bench/mm3_diffusers.py time --dir "$OUT/ckpt" --threads "$THREADS" --reps "$REPS" --json "$OUT/torch.json"
"$YUED" bench --family mm3 --models "$OUT/gguf" --only dit,vae --threads "$THREADS" --reps "$REPS" --json "$OUT/yued.json" >/dev/null
{
  echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F), preset $PRESET"
  "$PY" scripts/bench/mm3_diffusers.py table "$OUT/torch.json" "$OUT/yued.json"
} | tee "$OUT/table.txt"
