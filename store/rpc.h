// File: store/rpc.h
// Framed request/response over blocking TCP sockets (store/wire.h frames): a server that gives
// every connection a thread (the master's clients are a few engines and data nodes, each with
// one or two long-lived connections), and a client connection with one call in flight at a time.
// Every connection starts with the keyed challenge of transfer/peer_auth.h; the server bounds
// what a peer costs (connections, handshakes in progress, frame sizes, bytes held, deadlines).
// Control traffic only: data moves through transfer/.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "store/wire.h"
#include "transfer/peer_auth.h"
#include "transfer/sync.h"

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
  std::chrono::milliseconds frame_timeout{30000};  // From a frame's first byte to its last.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(15)};
  uint64_t max_body_bytes_in_flight = 256u << 20;  // Request bodies held by all connections.
};

/// Thread-safe. The handler runs on connection threads, concurrently.
class RpcServer {
 public:
  /// Binds and starts accepting. @return kUnavailable naming the address when it cannot bind.
  /// `verifier` null: no authentication (every peer a node with every scope; --auth none).
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(
      const std::string& host, uint16_t port, std::shared_ptr<const transfer::CredentialSet> verifier,
      RpcHandler handler, RpcLimits limits = {});
  /// Stops accepting, shuts every connection down and joins their threads.
  ~RpcServer();

  uint16_t port() const { return port_; }
  /// Malformed frames and peers that broke off mid-frame since start.
  uint64_t protocol_errors() const { return protocol_errors_.load(); }
  /// Connections refused: failed authentication, or over a limit.
  uint64_t auth_failures() const { return auth_failures_.load(); }
  uint64_t refused_connections() const { return refused_.load(); }

 private:
  RpcServer(int listen_fd, uint16_t port, std::shared_ptr<const transfer::CredentialSet> verifier,
            RpcHandler handler, RpcLimits limits);
  void AcceptLoop();
  void Serve(uint64_t id, int fd);
  void ServeAuthenticated(int fd, const transfer::Principal& peer);

  const int listen_fd_;
  const uint16_t port_;
  const std::shared_ptr<const transfer::CredentialSet> verifier_;
  const RpcHandler handler_;
  const RpcLimits limits_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> protocol_errors_{0};
  std::atomic<uint64_t> auth_failures_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<size_t> handshakes_{0};
  std::atomic<uint64_t> body_bytes_{0};
  std::thread accept_thread_;
  transfer::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  // Connection threads by id; those whose connection ended are joined on the next accept, so a
  // long-running master does not keep a stack per past connection.
  std::map<uint64_t, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
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
  transfer::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvgate::store
