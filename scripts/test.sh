#!/usr/bin/env bash
# The whole test suite, as CI runs it: system packages (build tools, ffmpeg, Chromium), the
# reference data the tests read (the Qwen ranks file from PyPI), the WebUI test's npm
# packages, then the style and lint checks and every crate's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/fetch-qwen-tiktoken.sh >/dev/null
# The WebUI test's driver (playwright-core, pinned by the lockfile).
(cd clients/web && npm ci --no-audit --no-fund --loglevel=error)
# The official client SDKs the front-door tests drive (PyPI, pinned, in their own venv).
YUED_PYCLIENTS_PYTHON=$(bash scripts/pyclients.sh)
export YUED_PYCLIENTS_PYTHON
# The ffmpeg cross-check, the browser test and the SDK tests must run here, never skip.
export YUED_REQUIRE_FFMPEG=1
export YUED_REQUIRE_BROWSER=1
export YUED_REQUIRE_PYCLIENTS=1
# A one-off build gains nothing from incremental caches, and they are gigabytes on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Style and lints first (rustfmt.toml; clippy's warnings are errors).
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked "$@"
