// File: store/rpc.h
// Framed request/response over TCP (store/wire.h frames): an event-driven server (one io thread
// for every connection, handlers on a small pool), and a blocking client connection with one
// call in flight at a time.
// Every connection starts with the keyed challenge of transfer/peer_auth.h; the server bounds
// what a peer costs (connections, handshakes in progress, frame sizes, bytes held, deadlines).
// Control traffic only: data moves through transfer/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "store/wire.h"
#include "transfer/peer_auth.h"

namespace kvgate::store {

/// A listening TCP socket on host:port (port 0: any); the fd and the bound port. `what` names
/// the listener in errors. @return kUnavailable naming the address when it cannot listen.
absl::StatusOr<std::pair<int, uint16_t>> ListenTcp(const std::string& host, uint16_t port,
                                                   std::string_view what);

/// Handles one request of an authenticated peer; returns the whole reply body (EncodeStatus()
/// then the payload).
using RpcHandler =
    std::function<std::string(const transfer::Principal& peer, Op op, std::string_view body)>;

/// What one peer may cost the server.
struct RpcLimits {
  size_t max_connections = 1024;
  size_t max_handshakes = 64;  // Connections not yet authenticated.
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds frame_timeout{30000};  // A frame, first byte to last; and its reply.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(15)};
  uint64_t max_body_bytes_in_flight = 256u << 20;  // Request bodies held by all connections.
};

/// Thread-safe. One io thread serves every connection (store/rpc_server.cc); the handler runs on
/// a small fixed pool of threads, concurrently.
class RpcServer {
 public:
  /// Binds and starts accepting. @return kUnavailable naming the address when it cannot bind.
  /// `verifier` null: no authentication (every peer a node with every scope; --auth none).
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(
      const std::string& host, uint16_t port,
      std::shared_ptr<const transfer::CredentialSet> verifier, RpcHandler handler,
      RpcLimits limits = {});
  /// Stops accepting, closes every connection and waits for the handlers in progress.
  ~RpcServer();

  uint16_t port() const;
  /// Malformed frames and peers that broke off mid-frame since start.
  uint64_t protocol_errors() const;
  /// Connections refused: failed authentication, or over a limit.
  uint64_t auth_failures() const;
  uint64_t refused_connections() const;

 private:
  struct Impl;  // The Asio state, kept out of this header.
  explicit RpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// One connection to one server, reconnected on the next call after a failure. Thread-safe
/// (calls are serialised).
class RpcConnection {
 public:
  /// `self` empty: no authentication (a server started with --auth none).
  RpcConnection(std::string host, uint16_t port, std::optional<transfer::Credential> self);
  ~RpcConnection();

  /// Sends `op` with `body` and returns the reply's payload, or the status the server answered
  /// with. @return kUnavailable when the server cannot be reached or the connection broke
  /// (the request may or may not have run); kDeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> Call(Op op, std::string_view body, std::chrono::milliseconds timeout);

  const std::string& address() const { return address_; }

 private:
  absl::Status ConnectLocked(std::chrono::milliseconds timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string host_;
  const uint16_t port_;
  const std::string address_;
  const std::optional<transfer::Credential> self_;
  common::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvgate::store
