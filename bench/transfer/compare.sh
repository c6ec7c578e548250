#!/usr/bin/env bash
# The transfer engine against its baselines, interleaved in one run so that both see the same
# machine load: tcp on loopback against iperf3 (one connection, and striped over four), shm
# against a single-thread memcpy of the same sizes, and the latency of a 4 KiB READ.
#
#   bench/transfer/compare.sh [BIN_DIR]      (default build/release/bin; REPS=5 SECS=2)
#
# Prints medians over REPS runs; docs/benchmarks.md records its output.
set -euo pipefail
BIN="${1:-build/release/bin}/kvgate-transfer-bench"
REPS="${REPS:-5}"
SECS="${SECS:-2}"
SIZES="${SIZES:-4K,1M,64M}"
[ -x "$BIN" ] || { echo "no $BIN (make build first)"; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 missing (scripts/setup installs it)"; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# GB/s (1e9 bytes) received by an iperf3 client run.
iperf() {
  local port; port=$(free_port)
  iperf3 -s -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  local server=$!
  # Wait for the listener without connecting to it (ss only looks).
  for _ in $(seq 100); do ss -ltn "sport = :$port" | grep -q LISTEN && break; sleep 0.05; done
  iperf3 -c 127.0.0.1 -p "$port" -t "$SECS" -P "$1" -J |
    python3 -c 'import json,sys;print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)'
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}
gbps() { awk '/GB\/s/ {for (i=1;i<=NF;i++) if ($i=="GB/s") print $(i-1)}'; }

echo "machine: $(nproc) vCPU, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
  "$(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg); medians of $REPS runs of ${SECS}s"

# Two tcp shapes: one 64 MiB READ (64 MiB of memory on each side, DRAM-resident like real KV
# blocks) and batches of 16 x 64 KiB READs (1 MiB, cache-resident like iperf3's 128 KiB
# buffer, so the protocol is compared rather than the memory system).
for conns in 1 4; do
  ip=() big=() small=()
  for _ in $(seq "$REPS"); do
    ip+=("$(iperf "$conns")")
    big+=("$("$BIN" --transport tcp --sizes 64M --connections "$conns" --seconds "$SECS" | gbps)")
    small+=("$("$BIN" --transport tcp --sizes 64K --batch 16 --connections "$conns" \
      --seconds "$SECS" | gbps)")
  done
  i=$(printf '%s\n' "${ip[@]}" | median)
  b=$(printf '%s\n' "${big[@]}" | median)
  m=$(printf '%s\n' "${small[@]}" | median)
  printf 'tcp READ, %d connection(s): 64M %5.2f GB/s (%5.1f%%), 16x64K %5.2f GB/s (%5.1f%%); iperf3 -P %d %5.2f GB/s\n' \
    "$conns" "$b" "$(echo "100*$b/$i" | bc -l)" "$m" "$(echo "100*$m/$i" | bc -l)" "$conns" "$i"
done

# shm twice: with the default two copy workers (Submit returns at once) and with copies inline
# in Submit (--copy-threads 0).
IFS=, read -r -a sizes <<<"$SIZES"
for size in "${sizes[@]}"; do
  mc=() sh=() si=()
  for _ in $(seq "$REPS"); do
    mc+=("$("$BIN" --memcpy --sizes "$size" --seconds "$SECS" | gbps)")
    sh+=("$("$BIN" --transport shm --sizes "$size" --seconds "$SECS" | gbps)")
    si+=("$("$BIN" --transport shm --sizes "$size" --seconds "$SECS" --copy-threads 0 | gbps)")
  done
  m=$(printf '%s\n' "${mc[@]}" | median)
  s=$(printf '%s\n' "${sh[@]}" | median)
  i=$(printf '%s\n' "${si[@]}" | median)
  printf 'shm %-4s READ: %6.2f GB/s (%5.1f%%), inline copies %6.2f GB/s (%5.1f%%); memcpy (1 thread) %6.2f GB/s\n' \
    "$size" "$s" "$(echo "100*$s/$m" | bc -l)" "$i" "$(echo "100*$i/$m" | bc -l)" "$m"
done

for t in shm tcp; do
  "$BIN" --transport "$t" --sizes 4K --latency --iters 20000 --verify
done
