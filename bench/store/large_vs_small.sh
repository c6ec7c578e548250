#!/usr/bin/env bash
# Does one large transfer starve small ones (issue 27, docs/benchmarks.md)? One kvgate-store;
# kvgate-store-bench puts and gets batches of 64 x 4 MiB (256 MiB a batch) while its probe gets
# one 16 KiB object in a loop, from its own client (own connections) and from the bench's client
# (shared, as a gateway's requests share one). Prints the probe's latency quiet and during the
# large gets, and the large gets' GB/s, ROUNDS times per transport and probe mode.
# Usage: bench/store/large_vs_small.sh BIN_DIR [SECONDS] [ROUNDS]
set -euo pipefail
SCRIPT=large_vs_small.sh
# shellcheck source=bench/store/lib.sh
source "$(dirname "$0")/lib.sh" "$@"
DURATION=${2:-3}
ROUNDS=${3:-1}
PORT=$(start_store store 2GiB)
track_stores
printf "%-4s %-6s %-6s %8s %8s %8s %8s\n" tr probe phase n p50_us p99_us max_us
for round in $(seq "$ROUNDS"); do
  for transport in tcp shm; do
    for mode in own shared; do
      flag=()
      [[ $mode == shared ]] && flag=(--probe-shared)
      out=$("$BIN_DIR/kvgate-store-bench" --store "127.0.0.1:$PORT" --transport "$transport" \
        --value-size 4M --batch 64 --seconds "$DURATION" --working-set 1G --probe-size 16K \
        "${flag[@]}" 2>&1) || { echo "$out"; die "$transport/$mode failed"; }
      echo "$out" | awk -v t="$transport" -v m="$mode" '
        $1 == "probe" && ($2 == "quiet" || $2 == "get") {
          for (i = 3; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
          printf "%-4s %-6s %-6s %8s %8s %8s %8s\n", t, m, $2, v["n"], v["p50_us"], v["p99_us"], v["max_us"]
        }
        $1 == "get" && $2 ~ /^ops/ { split($3, kv, "="); printf "%-4s %-6s large get GB/s=%s\n", t, m, kv[2] }'
    done
  done
done
