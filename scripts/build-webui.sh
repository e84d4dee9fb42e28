#!/usr/bin/env bash
# Rebuilds the WebUI bundle (clients/web/dist, committed and compiled into the yued
# binary) from clients/web/src with Vite. Run it after changing the page; `cargo build`
# alone never needs npm.
set -euo pipefail
cd "$(dirname "$0")/../clients/web"
npm ci --no-audit --no-fund
npx vite build
echo "built clients/web/dist; rebuild yued to embed it"
