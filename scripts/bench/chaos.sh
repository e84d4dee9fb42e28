#!/usr/bin/env bash
# Chaos: the daemon's reliability on the tiny demo (both families), as one markdown table.
#   1. kill -9 at N random points across N jobs (YuE2 and MiniMax alternating; each kill
#      aimed at one job while it is queued, in its AR half, synth, decode or encode, the
#      stage read from /job just before it), the daemon restarted on the same data dir after
#      each: every job done, none lost or duplicated, and every result's audio byte-identical
#      to a reference run of the same requests (fixed seeds) without kills.
#   2. mutated /synth bodies and /vae uploads (seeded): answers by class, no 5xx, the daemon
#      alive, every 4xx body a JSON {"error": "..."} (and how many name a field).
#   3. WebSocket listeners on one job, some reading 1 byte/s (YUED_WS_PING_SECS=1 here):
#      render time against the same job without listeners, the slow ones dropped with a
#      close reason, the daemon's RSS before/after.
#   4. kill -9 while songs of different jobs decode together: N rounds of four jobs (two of each
#      family) submitted at once, one kill a round at a random moment while two or more run,
#      the daemon restarted on the same data dir: every job done once, each result
#      byte-identical to a reference run of the same requests without kills.
# Usage: scripts/bench/chaos.sh [jobs=20] [synth_mutants=10000] [vae_mutants=1000]
#          [listeners=200] [slow=20] [port=18877]   (uses ports port..port+5)
# CHAOS_SECTIONS="1 2 3 4" picks sections, CHAOS_SEED the seed (1), CHAOS_THREADS the daemon's
# --threads (2), CHAOS_CLIENT_CPU pins section 3's listener client to one CPU (with
# CHAOS_THREADS=1: the compute thread and the listeners' client on cores of their own).
# Exits 1 when a row fails.
# Uses $YUED_BIN, else target/release/yued (built if missing). Loopback only; the helper
# (scripts/bench/chaos_fuzz.py) uses Python's standard library only.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-20}
synth=${2:-10000}
vae=${3:-1000}
listeners=${4:-200}
slow=${5:-20}
port=${6:-18877}
sections=${CHAOS_SECTIONS:-1 2 3 4}
seed=${CHAOS_SEED:-1}
threads=${CHAOS_THREADS:-2}
client_cpu=${CHAOS_CLIENT_CPU:+--client-cpu $CHAOS_CLIENT_CPU}
bin=${YUED_BIN:-target/release/yued}
[ -x "$bin" ] || cargo build --release -p yued --offline
bin=$(realpath "$bin")
work=$(mktemp -d)
# Every daemon the helper starts appends its pid here; the trap ends those (by pid) and
# removes the data directories.
trap 'while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$work/pids" 2>/dev/null; rm -rf "$work"' EXIT
touch "$work/pids"
helper() { python3 scripts/bench/chaos_fuzz.py "$1" --bin "$bin" --work "$work" --pidfile "$work/pids" --rows "$work/rows" \
  --port "$port" --seed "$seed" --jobs "$jobs" --synth "$synth" --vae "$vae" --listeners "$listeners" --slow "$slow" --threads "$threads" $client_cpu; }
echo "chaos: jobs=$jobs synth_mutants=$synth vae_mutants=$vae listeners=$listeners slow=$slow seed=$seed sections: $sections (yued: $bin)"
t0=$(date +%s)
for s in $sections; do
  ts=$(date +%s)
  case $s in
    1) helper kills ;;
    2) helper fuzz ;;
    3) helper ws ;;
    4) helper batch-kills ;;
    *) echo "unknown section $s" >&2; exit 2 ;;
  esac
  echo "section $s: $(( $(date +%s) - ts )) s" >&2
done
echo
echo "chaos.sh: $(( $(date +%s) - t0 )) s (jobs=$jobs, synth_mutants=$synth, vae_mutants=$vae, listeners=$listeners with $slow slow, seed=$seed)"
echo
python3 scripts/bench/chaos_fuzz.py table --rows "$work/rows"
