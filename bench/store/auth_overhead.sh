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
      if [[ $side == auth ]]; then
        run_side "$BIN_DIR" "$AUTH_PORT" auth "$transport"
      else
        run_side "$BIN_DIR" "$OPEN_PORT" open "$transport" --credentials none
      fi
    done
  done
done
echo "# $(nproc) cores; ${ROUNDS} alternating rounds of ${DURATION}s per side and transport; GB/s medians"
median_table auth open auth none auth/none
