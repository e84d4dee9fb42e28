#!/usr/bin/env bash
# Serving overhead of the daemon on loopback, with the release build and the demo model:
#   /health and /job?id= at a fixed request rate (p50/p99 from each request's scheduled
#   time), POST /synth refused at the admission cap (the cost of a 429), and a WebSocket
#   fan-out of N listeners on one job; the daemon's RSS and CPU seconds (its own
#   process_* metrics) around each step.
# Usage: scripts/bench/serve-load.sh [RPS=1000] [SECONDS=10] [LISTENERS=200]
# (YUED_COMPUTE_PRIORITY=idle|low|normal reaches the daemon like any YUED_ setting.)
set -euo pipefail
cd "$(dirname "$0")/../.."
RPS=${1:-1000}; SECS=${2:-10}; LISTENERS=${3:-200}
cargo build --release -p yued -p yue-client >&2
YUED=target/release/yued; YUE=target/release/yue
DATA=$(mktemp -d); PORT=${PORT:-18087}; SERVER=http://127.0.0.1:$PORT
$YUED serve --port "$PORT" --data-dir "$DATA" --admission-cap 2 --vae-core 32 2>"$DATA/log" &
PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$DATA"' EXIT
until curl -sf "$SERVER/health" | grep -q '"ready":true'; do sleep 0.2; done
FMT="python3 scripts/bench/fmt.py"
proc() { curl -s "$SERVER/metrics" | $FMT proc; }
row() { $FMT row "$1"; }
song='{"style":"bench","lyrics":"[verse] la","cot":"off","duration":30,"steps":8,"output_format":"wav16","semantic_sampling":{"min_tokens":750}}'
# Long enough (about 4 s of compute per 30 s of audio on 2 cores) to keep rendering for the
# whole /job window.
long='{"style":"bench","lyrics":"[verse] la","cot":"off","duration":240,"steps":8,"output_format":"wav16","semantic_sampling":{"min_tokens":6000}}'
echo "daemon up: $(proc)"
$YUE --server "$SERVER" load --path /health --rps "$RPS" --seconds "$SECS" | row "GET /health"
echo "  after: $(proc)"
ID=$(curl -s "$SERVER/synth" -H 'content-type: application/json' -d "$long" | $FMT id)
# Measure while the NAR and the VAE run (the heaviest compute, and the tiles going out).
until curl -s "$SERVER/job?id=$ID" | grep -Eq '"stage":"(synth|decode)"'; do sleep 0.2; done
$YUE --server "$SERVER" load --path "/job?id=$ID" --rps "$RPS" --seconds "$SECS" | row "GET /job?id= (running job)"
echo "  after: $(proc)"
curl -s "$SERVER/synth" -H 'content-type: application/json' -d "$song" >/dev/null   # fills the cap of 2
$YUE --server "$SERVER" load --path /synth --post "$song" --rps "$RPS" --seconds "$SECS" | row "POST /synth at the cap (429)"
echo "  after: $(proc)"
# Fan-out: the queue is cleared, then N listeners follow one fresh 30 s song to its end.
for id in $(curl -s "$SERVER/status" | $FMT running); do
  $YUE --server "$SERVER" cancel "$id" >/dev/null || true
done
until curl -s "$SERVER/status" | grep -q '"running":\[\]'; do sleep 0.2; done
FAN=$(curl -s "$SERVER/synth" -H 'content-type: application/json' -d "$song" | $FMT id)
$YUE --server "$SERVER" fanout "$FAN" --listeners "$LISTENERS" | $FMT fanout
echo "  after: $(proc)"
