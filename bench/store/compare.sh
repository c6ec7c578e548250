#!/usr/bin/env bash
# File: bench/store/compare.sh
# Runs kvgate-store-bench against kvgate-store (shm and tcp transports), Redis and memcached, all
# on loopback with 256 KiB values in batches of 64, then prints a throughput table and the ratios
# of kvgate-store to each peer. Usage: bench/store/compare.sh BIN_DIR [SECONDS]
set -euo pipefail

die() { echo "compare.sh: $*" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 BIN_DIR [SECONDS]" >&2; exit 2; }
BIN_DIR=$(cd "$1" && pwd) || die "no such directory: $1"  # Absolute: kvgate-store runs elsewhere.
DURATION=${2:-5}  # Not SECONDS: bash owns that name (and wait_ready uses it).
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "SECONDS must be a positive integer"
for bin in kvgate-store kvgate-store-bench; do
  [[ -x $BIN_DIR/$bin ]] || die "$BIN_DIR/$bin not found or not executable"
done
for tool in redis-server redis-cli memcached curl; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvgate-compare.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

USED_PORTS=" "
free_port() {
  local port
  while true; do
    port=$(/usr/bin/python3 -c \
      'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    if [[ $USED_PORTS != *" $port "* ]]; then
      USED_PORTS+="$port "
      echo "$port"
      return
    fi
  done
}

# wait_ready NAME PID TIMEOUT_S CMD...: polls CMD until it succeeds; fails if NAME dies first.
wait_ready() {
  local name=$1 pid=$2 timeout=$3
  local deadline=$((SECONDS + timeout))
  shift 3
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$WORK/$name.log" >&2 || true
      die "$name exited during startup (log above)"
    fi
    ((SECONDS < deadline)) || die "$name not ready after ${timeout} s"
    sleep 0.1
  done
}
redis_ping() { [[ $(redis-cli -h 127.0.0.1 -p "$1" ping) == PONG ]]; }
tcp_probe() { (exec 3<>"/dev/tcp/127.0.0.1/$1"); }

echo "# $(redis-server --version)"
echo "# $(memcached -V)"

REDIS_PORT=$(free_port)
MEMCACHED_PORT=$(free_port)
STORE_PORT=$(free_port)
STORE_HTTP_PORT=$(free_port)
mkdir "$WORK/redis" "$WORK/store"

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" --save '' \
  --appendonly no --maxmemory 1gb --maxmemory-policy allkeys-lru --protected-mode no \
  --daemonize no >"$WORK/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")

memcached_user=()
((EUID != 0)) || memcached_user=(-u root)  # memcached refuses to run as root without -u.
memcached -p "$MEMCACHED_PORT" -U 0 -l 127.0.0.1 -m 1024 -I 2m -t 2 \
  ${memcached_user[@]+"${memcached_user[@]}"} >"$WORK/memcached.log" 2>&1 &
MEMCACHED_PID=$!
PIDS+=("$MEMCACHED_PID")

(cd "$WORK/store" && exec "$BIN_DIR/kvgate-store" --listen "127.0.0.1:$STORE_PORT" \
  --http-listen "127.0.0.1:$STORE_HTTP_PORT" --memory 1GiB) >"$WORK/kvgate-store.log" 2>&1 &
STORE_PID=$!
PIDS+=("$STORE_PID")

wait_ready redis "$REDIS_PID" 20 redis_ping "$REDIS_PORT"
wait_ready memcached "$MEMCACHED_PID" 20 tcp_probe "$MEMCACHED_PORT"
wait_ready kvgate-store "$STORE_PID" 20 curl -sf "http://127.0.0.1:$STORE_HTTP_PORT/health"

# run_bench LABEL ARGS...: appends "LABEL put_ops put_gbs get_ops get_gbs" to $WORK/results
# ("-" fields when the run failed) and returns non-zero on failure.
run_bench() {
  local label=$1
  shift
  local out="$WORK/bench-${label//\//-}.out"
  local -a cmd=("$BIN_DIR/kvgate-store-bench" "$@" --value-size 256K --batch 64 \
    --seconds "$DURATION" --warmup 1280M --working-set 256M)
  echo "== $label: ${cmd[*]}" >&2
  local rc=0
  "${cmd[@]}" >"$out" 2>&1 || rc=$?
  sed 's/^/   /' "$out" >&2
  if ((rc == 0)) && awk -v label="$label" '
      ($1 == "put" || $1 == "get") && $2 ~ /^ops\/s=/ {
        for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[$1, kv[1]] = kv[2] }
        seen[$1] = 1
      }
      END {
        if (!("put" in seen) || !("get" in seen)) exit 1
        print label, v["put", "ops/s"], v["put", "GB/s"], v["get", "ops/s"], v["get", "GB/s"]
      }' "$out" >>"$WORK/results"; then
    return 0
  fi
  ((rc != 0)) || rc=1
  echo "compare.sh: $label failed (exit $rc, or no put/get lines)" >&2
  echo "$label - - - -" >>"$WORK/results"
  return "$rc"
}

: >"$WORK/results"
failed=0
run_bench kvgate-store/shm --store "127.0.0.1:$STORE_PORT" --transport shm || failed=1
run_bench kvgate-store/tcp --store "127.0.0.1:$STORE_PORT" --transport tcp || failed=1
run_bench redis --redis "127.0.0.1:$REDIS_PORT" || failed=1
run_bench memcached --memcached "127.0.0.1:$MEMCACHED_PORT" || failed=1

echo
awk '
  { label[NR] = $1; for (i = 2; i <= 5; ++i) val[$1, i] = $i }
  END {
    fmt = "%-18s %12s %10s %12s %10s\n"
    printf fmt, "target", "put ops/s", "put GB/s", "get ops/s", "get GB/s"
    for (r = 1; r <= NR; ++r) {
      l = label[r]
      printf fmt, l, val[l, 2], val[l, 3], val[l, 4], val[l, 5]
    }
    print ""
    print "ratios (GB/s, kvgate-store / peer):"
    split("put get", ops, " ")
    split("shm tcp", transports, " ")
    split("redis memcached", peers, " ")
    for (o = 1; o <= 2; ++o) {
      col = 2 * o + 1  # put GB/s is field 3, get GB/s field 5.
      for (t = 1; t <= 2; ++t) {
        for (p = 1; p <= 2; ++p) {
          a = val["kvgate-store/" transports[t], col]
          b = val[peers[p], col]
          name = ops[o] " " transports[t] "/" peers[p]
          if (a == "" || a == "-" || b == "" || b == "-" || b + 0 == 0) {
            printf "%-22s n/a\n", name
          } else {
            printf "%-22s %.2fx\n", name, a / b
          }
        }
      }
    }
  }' "$WORK/results"

exit "$failed"
