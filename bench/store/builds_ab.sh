#!/usr/bin/env bash
# The store before and after a change (issue 27: authentication with capabilities against the
# earlier figures): kvgate-store and kvgate-store-bench from OLD_BIN and from NEW_BIN, both with
# authentication on, side by side; 256 KiB values in batches of 64, ROUNDS rounds per transport
# whose order alternates, medians compared. Each bench talks to the store of its own build.
# Usage: bench/store/builds_ab.sh OLD_BIN NEW_BIN [SECONDS] [ROUNDS]
set -euo pipefail
SCRIPT=builds_ab.sh
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_BIN NEW_BIN [SECONDS] [ROUNDS]" >&2; exit 1; }
OLD_BIN=$(cd "$1" && pwd)
# shellcheck source=bench/store/lib.sh
source "$(dirname "$0")/lib.sh" "$2"
DURATION=${3:-3}
ROUNDS=${4:-5}
for bin in kvgate-store kvgate-store-bench; do
  [[ -x "$OLD_BIN/$bin" ]] || die "$OLD_BIN/$bin is missing"
done
OLD_PORT=$(BIN_DIR=$OLD_BIN start_store old 1GiB)
NEW_PORT=$(start_store new 1GiB)
track_stores
: >"$WORK/results"
for transport in tcp shm; do
  for round in $(seq "$ROUNDS"); do
    sides="old new"
    ((round % 2 == 0)) && sides="new old"  # Neither side always runs first.
    for side in $sides; do
      port=$NEW_PORT; bin=$BIN_DIR
      [[ $side == old ]] && { port=$OLD_PORT; bin=$OLD_BIN; }
      out=$("$bin/kvgate-store-bench" --store "127.0.0.1:$port" --transport "$transport" \
        --value-size 256K --batch 64 --seconds "$DURATION" --warmup 512M --working-set 256M \
        2>&1) || { echo "$out"; die "$side/$transport failed"; }
      echo "$out" | awk -v s="$side" -v t="$transport" '
        ($1 == "put" || $1 == "get") && $2 ~ /^ops\/s=/ {
          for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == "GB/s") print s, t, $1, kv[2] }
        }' >>"$WORK/results"
    done
  done
done
echo "# $(nproc) cores; ${ROUNDS} alternating rounds of ${DURATION}s per build and transport; GB/s medians"
sort -k1,3 -k4n "$WORK/results" | awk '
  { k = $1 " " $2 " " $3; v[k, ++n[k]] = $4 }
  END {
    for (k in n) med[k] = v[k, int((n[k] + 1) / 2)]
    printf "%-4s %-4s %10s %10s %10s\n", "tr", "op", "before", "after", "after/before"
    split("tcp shm", ts, " "); split("put get", os, " ")
    for (i = 1; i <= 2; ++i) for (j = 1; j <= 2; ++j) {
      a = med["old " ts[i] " " os[j]]; b = med["new " ts[i] " " os[j]]
      printf "%-4s %-4s %10s %10s %10.3f\n", ts[i], os[j], a, b, (a > 0 ? b / a : 0)
    }
  }'
