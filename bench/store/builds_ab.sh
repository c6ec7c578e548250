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
      if [[ $side == old ]]; then
        run_side "$OLD_BIN" "$OLD_PORT" old "$transport"
      else
        run_side "$BIN_DIR" "$NEW_PORT" new "$transport"
      fi
    done
  done
done
echo "# $(nproc) cores; ${ROUNDS} alternating rounds of ${DURATION}s per build and transport; GB/s medians"
median_table new old after before after/before
