// File: transfer/metrics.h
// Counters the engine keeps per transport, and the seam through which an embedding binary
// publishes them (Prometheus or anything else) without transfer/ depending on a metrics library.
// TransportStats is thread-safe (relaxed atomics); MetricsSink implementations are called on the
// thread that calls TransferEngine::CollectMetrics().
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "transfer/types.h"

namespace kvgate::transfer {

struct TransportStats {
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> write_bytes{0};
  std::atomic<uint64_t> reads{0};  // Requests taken, by op.
  std::atomic<uint64_t> writes{0};
  std::atomic<uint64_t> failures{0};       // Requests or slices that ended failed or timed out.
  std::atomic<uint64_t> retries{0};        // Slices sent again after a broken connection.
  std::atomic<uint64_t> auth_failures{0};  // Peers that did not prove a credential (owner side).
  std::atomic<uint64_t> capability_denied{0};  // Requests refused for their capability (owner).

  void CountRequest(TransferOp op) {
    (op == TransferOp::kRead ? reads : writes).fetch_add(1, std::memory_order_relaxed);
  }
  void CountBytes(TransferOp op, uint64_t n) {
    (op == TransferOp::kRead ? read_bytes : write_bytes).fetch_add(n, std::memory_order_relaxed);
  }
};

/// Receives one sample per counter and label set. Names follow kvgate_transfer_<name>_total:
///   kvgate_transfer_bytes_total{transport, op}     bytes moved
///   kvgate_transfer_requests_total{transport, op}  requests taken
///   kvgate_transfer_failures_total{transport}      failed or timed-out requests/slices
///   kvgate_transfer_retries_total{transport}       slices retried on a new connection
///   kvgate_transfer_auth_failures_total{transport} peers refused at the keyed challenge
///   kvgate_transfer_capability_denied_total{transport} requests refused: no valid capability
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  /// `op` is "read", "write" or "" when the counter has no op label.
  virtual void Counter(std::string_view name, std::string_view help, std::string_view transport,
                       std::string_view op, uint64_t value) = 0;
};

}  // namespace kvgate::transfer
