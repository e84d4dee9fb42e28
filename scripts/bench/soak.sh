#!/usr/bin/env bash
# Soak: N short jobs through one daemon on the tiny demo, then the journal's size on disk and
# the daemon's resident memory, sampled every 500 jobs (both must stay bounded: ended jobs
# leave the journal with their results). Usage: scripts/bench/soak.sh [jobs=2000] [port=18777]
# Uses $YUED_BIN, else target/release/yued (built if missing). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-2000}
port=${2:-18777}
bin=${YUED_BIN:-target/release/yued}
[ -x "$bin" ] || cargo build --release -p yued
data=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$data"' EXIT
"$bin" serve --port "$port" --data-dir "$data" --threads 2 --admission-cap 8 >"$data.log" 2>&1 &
pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 1 120); do curl -sf "$url/health" | grep -q '"ready":true' && break; sleep 0.5; done
body='{"style": "soak", "lyrics": "[verse] la", "cot": "off", "duration": 0.4, "steps": 1, "output_format": "wav16", "semantic_sampling": {"min_tokens": 10}}'
sample() {
  local kb rss known
  kb=$(du -sk "$data/journal" | cut -f1)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  known=$(curl -sf "$url/status" | sed -n 's/.*"jobs_known":\([0-9]*\).*/\1/p')
  printf '%8s %14s %12s %11s\n' "$1" "$kb" "$rss" "$known"
}
printf '%8s %14s %12s %11s\n' jobs "journal KiB" "RSS KiB" "jobs known"
sample 0
done_jobs=0
while [ "$done_jobs" -lt "$jobs" ]; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url/synth" -d "$body")
  if [ "$code" = 200 ]; then
    done_jobs=$((done_jobs + 1))
    if [ $((done_jobs % 500)) -eq 0 ]; then sample "$done_jobs"; fi
  elif [ "$code" = 429 ]; then
    sleep 0.05
  else
    echo "submit answered $code" >&2; exit 1
  fi
done
# Drain the queue, then the final figures.
for _ in $(seq 1 600); do
  q=$(curl -sf "$url/status")
  echo "$q" | grep -q '"queued":0' && echo "$q" | grep -q '"running":\[\]' && break
  sleep 0.5
done
sample "$jobs (end)"
