#!/usr/bin/env bash
# yued against yue2.cpp on this machine, the same files and the same song, side by side in one
# run: `scripts/bench/vs-yue2cpp.sh YUE_SYNTH [YUED] [WORKDIR]`, where YUE_SYNTH is a build of
# yue2.cpp's `yue-synth` (built by you from its repository: cmake, CPU, its defaults) and YUED a
# release yued (default: target/release/yued). Writes the full-size demo models into WORKDIR
# (default: yued-data/vs-yue2cpp, ~4.3 GB) and renders one song with each program per round.
# Environment: SECONDS_OF_SONG (8), STEPS (8), ROUNDS (2), THREADS (default: the count yue2.cpp
# reports, its physical cores), YUED_DEVICE (CPU). Prints a table with the ratio of the medians.
set -euo pipefail
synth=${1:?usage: vs-yue2cpp.sh YUE_SYNTH [YUED] [WORKDIR]}
here=$(cd "$(dirname "$0")" && pwd)
yued=${2:-$here/../../target/release/yued}
work=${3:-yued-data/vs-yue2cpp}
[ -x "$synth" ] || { echo "not an executable: $synth" >&2; exit 2; }
[ -x "$yued" ] || { echo "not an executable: $yued (cargo build --release -p yued)" >&2; exit 2; }
exec python3 "$here/vs_yue2cpp.py" "$synth" "$yued" "$work"
