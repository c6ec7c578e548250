// File: transfer/rdma/rdma_handshake.h
// The out-of-band exchange that connects RC queue pairs, over plain TCP (control plane only):
// the owner's listener thread creates responder QPs for each client and keeps them while the
// client's TCP connection stays open; the client side is one blocking request/reply. Private to
// transfer/rdma/. HandshakeServer is thread-safe; ExchangeHello is stateless.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "transfer/peer_auth.h"
#include "transfer/rdma/rdma_context.h"
#include "transfer/types.h"

namespace kvgate::transfer::rdma_internal {

/// A random 24-bit packet sequence number.
uint32_t RandomPsn();

/// Client: connects to `endpoint` ("host:port"), sends `hello`, reads `*reply`. Returns the
/// connected socket; the caller keeps it open as long as its QPs live (closing it releases the
/// owner's side). @return kUnavailable naming the endpoint on any failure or a refusal.
/// With `auth`, the socket first runs the keyed challenge (transfer/peer_auth.h) for `segment`.
absl::StatusOr<int> ExchangeHello(const std::string& endpoint, const RdmaHello& hello,
                                  RdmaHelloReply* reply, Clock::time_point deadline,
                                  const PeerAuthPtr& auth, const std::string& segment);

class HandshakeServer {
 public:
  /// Listens on params.listen_address:params.handshake_port and serves clients that name
  /// `instance`. `devices` outlive the server.
  /// With `auth`, a client must prove a credential of its set for `segment` before it gets
  /// QPs (and with them one-sided access to registered memory).
  static absl::StatusOr<std::unique_ptr<HandshakeServer>> Start(
      const RdmaParams& params, std::string instance,
      const std::vector<std::unique_ptr<RdmaDevice>>* devices, PeerAuthPtr auth,
      std::string segment);
  /// Stops the thread and destroys every responder QP.
  ~HandshakeServer();
  HandshakeServer(const HandshakeServer&) = delete;
  HandshakeServer& operator=(const HandshakeServer&) = delete;

  /// "host:port" clients connect to.
  const std::string& endpoint() const { return endpoint_; }

 private:
  // The responder QPs of one client, alive while its socket is open.
  struct Client {
    int fd = -1;
    std::vector<ibv_qp*> qps;
  };

  HandshakeServer(const RdmaParams& params, std::string instance,
                  const std::vector<std::unique_ptr<RdmaDevice>>* devices);
  void Loop();
  void Accept();

  const RdmaParams params_;
  const std::string instance_;
  PeerAuthPtr auth_;     // Set by Start(), before the thread.
  std::string segment_;
  const std::vector<std::unique_ptr<RdmaDevice>>* const devices_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::string endpoint_;
  std::vector<Client> clients_;  // Server thread only.
  std::thread thread_;
};

}  // namespace kvgate::transfer::rdma_internal
