#!/usr/bin/env bash
# Builds yued in release mode and runs the daemon on the embedded tiny demo model
# (random weights, written into ./yued-data on first start). Extra flags go to `yued serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh --build-only
exec cargo run --release --locked -p yued -- serve "$@"
