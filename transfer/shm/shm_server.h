// File: transfer/shm/shm_server.h
// The owner side of the shm transport: one thread answers same-host peers on an abstract Unix
// socket, handing each managed buffer's memfd over once (SCM_RIGHTS) and telling every peer when
// a buffer is unregistered so it unmaps it. After that, peers copy with plain loads and stores:
// no kernel round trip per transfer. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvgate::transfer {

class MemoryRegistry;

namespace shm_internal {

class ShmServer {
 public:
  /// Listens on the abstract socket `name`; `registry` outlives the server.
  static absl::StatusOr<std::unique_ptr<ShmServer>> Start(std::string name,
                                                          const MemoryRegistry* registry);
  ~ShmServer();
  ShmServer(const ShmServer&) = delete;
  ShmServer& operator=(const ShmServer&) = delete;

  const std::string& name() const { return name_; }
  /// Tells every connected peer that buffer `id` is gone and waits until each has dropped its
  /// mapping (or `timeout` passes, or it disconnects), so that no transfer submitted after this
  /// returns can touch the buffer. A peer that cannot take the message at once is disconnected
  /// (it re-requests what it needs). Copies already running finish on the old pages, which
  /// stay valid until their last mapping goes. Do not call from the server thread.
  void Revoke(uint64_t id, std::chrono::milliseconds timeout = std::chrono::seconds(2));

 private:
  ShmServer(std::string name, const MemoryRegistry* registry, int listen_fd, int wake_fd);
  void Loop();
  void Serve(int client);
  // Server thread only.
  void DropLocked(int client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `client` no longer owes revoke `seq` (0: any) an acknowledgement.
  void AckLocked(int client, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const MemoryRegistry* registry_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd: stop.
  common::Mutex mu_;
  common::CondVar acked_;  // a pending revoke lost a peer
  static constexpr size_t kMaxClients = 4096;
  std::vector<int> clients_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;  // Peers of another user, or over kMaxClients.
  // Revokes in progress: their number -> the peers that have not acknowledged yet.
  std::vector<std::pair<uint64_t, std::vector<int>>> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_revoke_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shm_internal
}  // namespace kvgate::transfer
