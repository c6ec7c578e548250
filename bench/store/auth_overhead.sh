#!/usr/bin/env bash
# What the store's authentication costs (issue 27, docs/benchmarks.md): two kvgate-stores side by
# side, one with the keyed challenge (the default) and one with --auth none; kvgate-store-bench
# runs 256 KiB batches of 64 against each in turn, ROUNDS times per transport, and the medians
# are compared. Alternating rounds keep a busy machine from favouring one side.
# Usage: bench/store/auth_overhead.sh BIN_DIR [SECONDS] [ROUNDS]
set -euo pipefail
die() { echo "auth_overhead.sh: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: $0 BIN_DIR [SECONDS] [ROUNDS]"
BIN_DIR=$(cd "$1" && pwd) || die "no such directory: $1"
DURATION=${2:-3}
ROUNDS=${3:-3}
for bin in kvgate-store kvgate-store-bench; do
  [[ -x "$BIN_DIR/$bin" ]] || die "$BIN_DIR/$bin is missing (cmake --build ... --target $bin)"
done
WORK=$(mktemp -d)
export KVGATE_STORE_CREDENTIALS="$WORK/credentials"  # This run's own secrets.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait || true; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_store() {  # name, extra flags...
  local name=$1 port http
  shift
  port=$(free_port)
  http=$(free_port)
  mkdir -p "$WORK/$name"
  (cd "$WORK/$name" && exec "$BIN_DIR/kvgate-store" --listen "127.0.0.1:$port" \
    --http-listen "127.0.0.1:$http" --memory 1GiB --node-name "$name" "$@") \
    >"$WORK/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$http/health" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$http/health" >/dev/null || { cat "$WORK/$name.log"; die "$name did not start"; }
  echo "$port"
}
AUTH_PORT=$(start_store auth)
OPEN_PORT=$(start_store open --auth none)
: >"$WORK/results"
for transport in tcp shm; do
  for round in $(seq "$ROUNDS"); do
    for side in auth open; do
      port=$AUTH_PORT; creds=""
      [[ $side == open ]] && { port=$OPEN_PORT; creds=none; }
      out=$("$BIN_DIR/kvgate-store-bench" --store "127.0.0.1:$port" --credentials "$creds" \
        --transport "$transport" --value-size 256K --batch 64 --seconds "$DURATION" \
        --warmup 512M --working-set 256M 2>&1) || { echo "$out"; die "$side/$transport failed"; }
      echo "$out" | awk -v s="$side" -v t="$transport" '
        ($1 == "put" || $1 == "get") && $2 ~ /^ops\/s=/ {
          for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == "GB/s") print s, t, $1, kv[2] }
        }' >>"$WORK/results"
    done
  done
done
echo "# $(nproc) cores; ${ROUNDS} alternating rounds of ${DURATION}s per side and transport; GB/s medians"
sort -k1,3 -k4n "$WORK/results" | awk '
  { k = $1 " " $2 " " $3; v[k, ++n[k]] = $4 }
  END {
    for (k in n) med[k] = v[k, int((n[k] + 1) / 2)]
    printf "%-4s %-4s %10s %10s %8s\n", "tr", "op", "auth", "none", "auth/none"
    split("tcp shm", ts, " "); split("put get", os, " ")
    for (i = 1; i <= 2; ++i) for (j = 1; j <= 2; ++j) {
      a = med["auth " ts[i] " " os[j]]; b = med["open " ts[i] " " os[j]]
      printf "%-4s %-4s %10s %10s %8.3f\n", ts[i], os[j], a, b, (b > 0 ? a / b : 0)
    }
  }'
