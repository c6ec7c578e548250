#!/usr/bin/env bash
# Where a proxy's CPU goes, kernel and user space together: `perf record` of the proxy process
# for 4 s of a 6 s wrk run (one proxy thread, the request kinds of bench/proxy/targets.sh), then
# its CPU a request split by object (kernel, proxy binary, libc, allocator, simdjson, vDSO) and
# the top symbols. Callgrind (callgrind.sh) counts user-space instructions only; this adds the
# kernel, where most of a small request's time is.
# Usage: bench/proxy/perf.sh [kind=4k] [connections=32]   (needs `make build` and linux-perf)
# Env: TARGETS="haproxy-nodelay kvgate", UPSTREAM=static|fake (default static), BIN=build,
# POLICY=kvaware, KEEP=DIR to keep perf.<target>.data, TOP=25 symbols listed per target.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIND=${1:-4k}
CONNS=${2:-32}
TARGETS=${TARGETS:-"haproxy-nodelay kvgate"}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
TOP=${TOP:-25}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh
out=${KEEP:-$tmp}
mkdir -p "$out"
if [ "${UPSTREAM:-static}" = static ]; then start_static; else start_fake_upstream; fi
for name in $TARGETS; do
  start_target "$name" 1
  load_in_background "$KIND" "$CONNS" 6 "$tmp/wrk.txt"
  w=$LOAD_PID
  perf record -q -F 4000 -g -p "$TPID" -o "$out/perf.$name.data" -- sleep 4 >/dev/null 2>&1
  wait "$w"
  rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt")
  echo "## $name: $rps req/s"
  perf report -i "$out/perf.$name.data" --no-children --sort dso -g none -n --stdio 2>/dev/null |
    /usr/bin/python3 -c '
import re, sys
rps = float(sys.argv[1])
rows = [(m.group(3), int(m.group(2))) for m in
        (re.match(r"\s*([0-9.]+)%\s+(\d+)\s+(\S+)", line) for line in sys.stdin) if m]
samples = sum(n for _, n in rows)
busy = samples / (4 * 4000)  # the share of one core the proxy used
per = busy / rps * 1e6 if rps else 0
print("CPU a request: %.1f us (%.0f%% of a core, %d samples)" % (per, busy * 100, samples))
for dso, n in rows:
    print("  %-32s %5.1f%%  %5.2f us" % (dso, 100.0 * n / samples, per * n / samples))
' "$rps"
  echo "top symbols:"
  perf report -i "$out/perf.$name.data" --no-children --sort dso,sym -g none --stdio 2>/dev/null |
    awk -v top="$TOP" '/%/ && n++ < top'  # reads it all: head would fail the pipe
  stop_target
done
