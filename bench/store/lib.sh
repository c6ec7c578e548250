# File: bench/store/lib.sh
# Sourced by the store's benchmark scripts: checks BIN_DIR, makes a work dir with its own
# credentials file, and starts kvgate-stores on loopback that are stopped on exit.
#   SCRIPT=name.sh; source "$(dirname "$0")/lib.sh" "$@"   # sets BIN_DIR, WORK
#   port=$(start_store NAME MEMORY [kvgate-store flags...])
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
