// File: bench/store/peer_clients.h
// Blocking loopback clients for the comparison peers of kvgate-store-bench: Redis 7 (RESP2,
// pipelined SETs / GETs per batch) and memcached (text protocol, pipelined `set`s / one multi-key
// `get`). Plain POSIX sockets, one connection per client; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvgate::store::bench {

class KvPeer {
 public:
  virtual ~KvPeer() = default;
  virtual std::string_view Name() const = 0;  // "redis" / "memcached".
  /// Stores values[i] under keys[i] as ONE pipelined batch (Redis: pipelined SETs; memcached: N
  /// `set` commands written in one go, then N "STORED" replies read). Error (absl::Status, with
  /// the peer name and the reply text) on any failure.
  virtual absl::Status PutBatch(absl::Span<const std::string> keys,
                                absl::Span<const std::string_view> values) = 0;
  /// Reads every key into out[i] (the caller sized out[i] to the expected value size); Redis:
  /// pipelined GETs; memcached: one `get k1 k2 ...`. kNotFound naming the key on a miss, kDataLoss
  /// on a size mismatch. Payloads are received straight into out[i].
  virtual absl::Status GetBatch(absl::Span<const std::string> keys,
                                absl::Span<const absl::Span<uint8_t>> out) = 0;
};

/// TCP_NODELAY, a 30 s SO_RCVTIMEO/SO_SNDTIMEO; kUnavailable naming host:port when it cannot
/// connect.
absl::StatusOr<std::unique_ptr<KvPeer>> ConnectRedis(const std::string& host, uint16_t port);
absl::StatusOr<std::unique_ptr<KvPeer>> ConnectMemcached(const std::string& host, uint16_t port);

}  // namespace kvgate::store::bench
