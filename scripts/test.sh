#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages, the reference data the tests read
# (the Qwen ranks file from PyPI), then every crate's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/fetch-qwen-tiktoken.sh >/dev/null
# The ffmpeg cross-check must run here, never skip.
export YUED_REQUIRE_FFMPEG=1
cargo test --workspace --locked "$@"
