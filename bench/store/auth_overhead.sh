#!/usr/bin/env bash
# What the store's authentication costs (issue 27, docs/benchmarks.md): two kvgate-stores side by
# side, one with the keyed challenge (the default) and one with --auth none; kvgate-store-bench
# runs 256 KiB batches of 64 against each in turn, ROUNDS times per transport, and the medians
# are compared. Alternating rounds keep a busy machine from favouring one side.
# Usage: bench/store/auth_overhead.sh BIN_DIR [SECONDS] [ROUNDS]
set -euo pipefail
SCRIPT=auth_overhead.sh
# shellcheck source=bench/store/lib.sh
source "$(dirname "$0")/lib.sh" "$@"
DURATION=${2:-3}
ROUNDS=${3:-3}
AUTH_PORT=$(start_store auth 1GiB)
OPEN_PORT=$(start_store open 1GiB --auth none)
track_stores
: >"$WORK/results"
for transport in tcp shm; do
  for round in $(seq "$ROUNDS"); do
    sides="auth open"
    ((round % 2 == 0)) && sides="open auth"  # Neither side always runs first.
    for side in $sides; do
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
