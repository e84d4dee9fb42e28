#!/usr/bin/env bash
# The same benchmark sections on two yued binaries, one after the other in one run, and the
# table of both with their ratio: `scripts/bench/before-after.sh OLD_YUED NEW_YUED [bench flags]`
# (default flags: the tiny demo's AR, NAR, VAE and end-to-end sections). Each binary writes its
# own demo models (into a cache of its own), so the two never share a file format by accident.
set -euo pipefail
old=${1:?usage: before-after.sh OLD_YUED NEW_YUED [bench flags]}
new=${2:?usage: before-after.sh OLD_YUED NEW_YUED [bench flags]}
shift 2
flags=("$@")
if [ ${#flags[@]} -eq 0 ]; then
    flags=(--preset tiny --only prefill,decode,nar,vae,e2e --e2e-seconds 10 --reps 5)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
"$old" bench "${flags[@]}" --cache "$out/old-models" --json "$out/before.json" > "$out/before.txt"
"$new" bench "${flags[@]}" --cache "$out/new-models" --json "$out/after.json" > "$out/after.txt"
python3 "$here/before_after.py" "$out/before.json" "$out/after.json"
