#!/usr/bin/env bash
# Rebuilds the WebUI bundle (clients/web/dist, committed and compiled into the yued
# binary) from clients/web/src with Vite. Run it after changing the page; `cargo build`
# alone never needs npm.
set -euo pipefail
cd "$(dirname "$0")/../clients/web"
npm ci --no-audit --no-fund
npx vite build
# /docs: Swagger UI's prebuilt bundle (swagger-ui-dist, pinned by the lockfile) beside our
# page and its start script.
mkdir -p dist/docs
cp node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css docs/index.html docs/docs.js dist/docs/
echo "built clients/web/dist; rebuild yued to embed it"
