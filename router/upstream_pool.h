// File: router/upstream_pool.h
// Keep-alive connections from one gateway thread to the workers. Thread-compatible: each
// gateway thread owns one pool, used only from its own io_context, so it needs no locks.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/url.h"
#include "router/internal/asio.h"

namespace kvgate::router {

class UpstreamPool {
 public:
  explicit UpstreamPool(net::io_context& ioc) : ioc_(ioc) {}

  /// An idle connection to `authority` that still looks open, if any.
  std::optional<beast::tcp_stream> TakeIdle(const std::string& authority);

  /// Returns a connection whose last response was fully read; kept when fewer than `max_idle`
  /// are idle for that worker, closed otherwise.
  void PutIdle(const std::string& authority, beast::tcp_stream stream, uint32_t max_idle);

  /// Opens a new connection (async DNS unless the host is an address literal).
  /// @return kUnavailable on refusal/unreachable, kDeadlineExceeded on timeout.
  net::awaitable<absl::StatusOr<beast::tcp_stream>> Connect(const common::HttpUrl& url,
                                                            std::chrono::milliseconds timeout);

  /// Closes every idle connection (drain, worker removal).
  void Clear();
  size_t idle_count() const;

 private:
  net::io_context& ioc_;
  absl::flat_hash_map<std::string, std::vector<beast::tcp_stream>> idle_;
};

}  // namespace kvgate::router
