# File: bench/store/lib.sh
# Sourced by the store's benchmark scripts: checks BIN_DIR, makes a work dir with its own
# credentials file, and starts kvgate-stores on loopback that are stopped on exit.
#   SCRIPT=name.sh; source "$(dirname "$0")/lib.sh" "$@"   # sets BIN_DIR, WORK
#   port=$(start_store NAME MEMORY [kvgate-store flags...]); track_stores
#   run_side BIN PORT SIDE TRANSPORT [bench flags...]   (rounds)   then median_table ...
die() { echo "${SCRIPT:-bench}: $*" >&2; exit 1; }
[[ $# -ge 1 ]] || die "usage: ${SCRIPT:-$0} BIN_DIR [SECONDS] [ROUNDS]"
BIN_DIR=$(cd "$1" && pwd) || die "no such directory: $1"  # Absolute: the stores run elsewhere.
for bin in kvgate-store kvgate-store-bench; do
  [[ -x "$BIN_DIR/$bin" ]] || die "$BIN_DIR/$bin is missing (cmake --build ... --target $bin)"
done
WORK=$(mktemp -d)
export KVGATE_STORE_CREDENTIALS="$WORK/credentials"  # This run's own secrets.
STORE_PIDS=()
cleanup() {
  for p in ${STORE_PIDS[@]+"${STORE_PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait || true
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Starts a kvgate-store named NAME with MEMORY of pool and waits for /health; prints its port.
# (Called in $(...): the store's pid is kept in a file the parent reads back.)
start_store() {
  local name=$1 memory=$2 port http
  shift 2
  port=$(free_port)
  http=$(free_port)
  mkdir -p "$WORK/$name"
  (cd "$WORK/$name" && exec "$BIN_DIR/kvgate-store" --listen "127.0.0.1:$port" \
    --http-listen "127.0.0.1:$http" --memory "$memory" --node-name "$name" "$@") \
    >"$WORK/$name.log" 2>&1 &
  echo $! >>"$WORK/pids"
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$http/health" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$http/health" >/dev/null || { cat "$WORK/$name.log" >&2; die "$name did not start"; }
  echo "$port"
}
# Reads back the pids start_store recorded (call after the last start_store).
track_stores() { mapfile -t STORE_PIDS <"$WORK/pids"; }
# Runs kvgate-store-bench BIN (256 KiB values, batches of 64, DURATION seconds) against PORT
# and appends "SIDE TRANSPORT op GB/s" lines to $WORK/results. Extra bench flags follow.
run_side() {
  local bin=$1 port=$2 side=$3 transport=$4 out
  shift 4
  out=$("$bin/kvgate-store-bench" --store "127.0.0.1:$port" --transport "$transport" \
    --value-size 256K --batch 64 --seconds "$DURATION" --warmup 512M --working-set 256M "$@" \
    2>&1) || { echo "$out"; die "$side/$transport failed"; }
  echo "$out" | awk -v s="$side" -v t="$transport" '
    ($1 == "put" || $1 == "get") && $2 ~ /^ops\/s=/ {
      for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == "GB/s") print s, t, $1, kv[2] }
    }' >>"$WORK/results"
}
# Prints the medians of $WORK/results for sides A and B and their ratio A/B, per transport and
# op, under the column names NAME_A, NAME_B, RATIO.
median_table() {
  sort -k1,3 -k4n "$WORK/results" | awk -v A="$1" -v B="$2" -v NA="$3" -v NB="$4" -v R="$5" '
    { k = $1 " " $2 " " $3; v[k, ++n[k]] = $4 }
    END {
      for (k in n) med[k] = v[k, int((n[k] + 1) / 2)]
      printf "%-4s %-4s %10s %10s %12s\n", "tr", "op", NA, NB, R
      split("tcp shm", ts, " "); split("put get", os, " ")
      for (i = 1; i <= 2; ++i) for (j = 1; j <= 2; ++j) {
        a = med[A " " ts[i] " " os[j]]; b = med[B " " ts[i] " " os[j]]
        printf "%-4s %-4s %10s %10s %12.3f\n", ts[i], os[j], a, b, (b > 0 ? a / b : 0)
      }
    }'
}
