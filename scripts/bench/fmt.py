"""Formats the outputs of scripts/bench/serve-load.sh (stdin -> one line)."""
import json
import sys

kind = sys.argv[1]
if kind == "proc":
    m = {}
    for line in sys.stdin:
        if line.startswith("process_"):
            name, value = line.split()[:2]
            m[name] = float(value)
    print("rss %.1f MB, cpu %.2f s" % (m["process_resident_memory_bytes"] / 2**20, m["process_cpu_seconds_total"]))
elif kind == "row":
    r = json.load(sys.stdin)
    print("%-30s %7.0f rps  p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  (from the schedule: p50 %6.2f  p99 %6.2f)  statuses %s" % (sys.argv[2], r["achieved_rps"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["p50_from_schedule_ms"], r["p99_from_schedule_ms"], r["statuses"]))
elif kind == "fanout":
    r = json.load(sys.stdin)
    print("WS fan-out, %d listeners: tiles per listener %d..%d, completed %d, dropped %d, %.1f MB in %.1f s" % (r["listeners"], r["tiles_min"], r["tiles_max"], r["completed"], r["dropped"], r["bytes"] / 1e6, r["seconds"]))
elif kind == "id":
    print(json.load(sys.stdin)["id"])
elif kind == "running":
    print(" ".join(json.load(sys.stdin)["queue"]["running"]))
