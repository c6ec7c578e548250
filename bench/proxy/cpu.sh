#!/usr/bin/env bash
# CPU time and context switches a request of every process in the path — the proxy, the
# worker (the fake one, or nginx's static answer), wrk — for one request kind
# (bench/proxy/targets.sh names them), one proxy thread.
# On a 2-core machine the three share the cores, so a proxy that wakes its peers more often
# (more, smaller writes) slows them, not only itself. Figures from /proc over the middle 4 s of
# a 6 s wrk run: utime + stime, and voluntary + involuntary switches of every thread.
# Usage: bench/proxy/cpu.sh [kind=ssepaced] [connections=400]   (needs `make build`)
# Env: TARGETS="haproxy-nodelay kvgate", ROUNDS=3, BIN=build, POLICY=kvaware, KVGATE_BEFORE,
#      PART=user or PART=system (count only that part of each process's CPU time; default both),
#      UPSTREAM=static (nginx's one-write 4 KiB answer, as in syscalls.sh; default: the fake).
# The last column is TCP segments a request, every socket on the machine (loopback: each one
# sent is one received; nstat's TcpOutSegs over the same 4 s): a proxy that splits an answer
# into more writes sends more.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIND=${1:-ssepaced}
CONNS=${2:-400}
TARGETS=${TARGETS:-"haproxy-nodelay kvgate"}
ROUNDS=${ROUNDS:-3}
POLICY=${POLICY:-kvaware}
BIN=${BIN:-build}
# shellcheck source=bench/proxy/targets.sh
source bench/proxy/targets.sh
if [ "${UPSTREAM:-fake}" = static ]; then start_static; else start_fake_upstream; fi
fake=${pids[0]}
# nginx's master forks the worker that answers
[ "${UPSTREAM:-fake}" = static ] && fake=$(pgrep -P "$fake" | head -1)
hz=$(getconf CLK_TCK)
case ${PART:-both} in
  user) ticks() { awk '{print $14}' "/proc/$1/stat"; } ;;
  system) ticks() { awk '{print $15}' "/proc/$1/stat"; } ;;
  *) ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } ;;
esac
switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
echo "| round | target | req/s | CPU µs a request: proxy / worker / wrk | context switches a request: proxy / worker / wrk | TCP segments a request |"
echo "| --- | --- | --- | --- | --- | --- |"
for round in $(seq "$ROUNDS"); do
  for name in $TARGETS; do
    start_target "$name" 1
    load_in_background "$KIND" "$CONNS" 6 "$tmp/wrk.txt"
    w=$LOAD_PID
    proxy=${TPID:-$fake}
    a=() b=()
    for p in "$proxy" "$fake" "$w"; do a+=("$(ticks "$p") $(switches "$p")"); done
    nstat -n >/dev/null
    sleep 4
    for p in "$proxy" "$fake" "$w"; do b+=("$(ticks "$p") $(switches "$p")"); done
    segs=$(nstat -z TcpOutSegs | awk '$1 == "TcpOutSegs" {print $2}')
    wait "$w"
    rps=$(awk '/Requests\/sec/ {print $2}' "$tmp/wrk.txt")
    /usr/bin/python3 - "$round" "$name" "$rps" "$hz" "$segs" "${a[@]}" "${b[@]}" <<'PY'
import sys
rnd, name, rps, hz = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
segs = float(sys.argv[5])
a = [tuple(map(float, x.split())) for x in sys.argv[6:9]]
b = [tuple(map(float, x.split())) for x in sys.argv[9:12]]
n = rps * 4
cpu = " / ".join("%.1f" % ((y[0] - x[0]) / hz * 1e6 / n) for x, y in zip(a, b))
cs = " / ".join("%.2f" % ((y[1] - x[1]) / n) for x, y in zip(a, b))
print("| %s | %s | %.0f | %s | %s | %.2f |" % (rnd, name, rps, cpu, cs, segs / n))
PY
    stop_target
  done
done
