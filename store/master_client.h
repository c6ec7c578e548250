// File: store/master_client.h
// A connection to whichever master currently leads. The master is named by "host:port" (one
// master), "host:port,host:port" (the first that says it leads) or "etcd://..." (the address
// the leader published, store/leader_election.h). A call that finds no leader, or a leader that
// went away, re-resolves and retries until its deadline, so callers ride over a failover.
// Thread-safe. Calls are serialised on one connection, except WaitKeys (a put waiting for
// another writer of the same key, up to its in_flight_wait), which has a connection of its own:
// on the shared one it held every other call of the client behind it, so a lookup on a
// serving engine's critical path waited out another writer's put. The master serves waits on a
// pool of their own.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "store/leader_election.h"
#include "store/rpc.h"
#include "store/wire.h"

namespace kvgate::store {

class MasterClient {
 public:
  /// @return kInvalidArgument for a malformed address. Connects lazily.
  static absl::StatusOr<std::unique_ptr<MasterClient>> Create(
      std::string master, std::string client_name,
      std::chrono::milliseconds timeout = std::chrono::seconds(10),
      std::optional<transfer::Credential> credential = std::nullopt);

  /// Sends `req` and decodes the reply into `Resp`. kUnavailable replies (a standby) and broken
  /// connections are retried on the leader until the time-out; other errors return at once.
  template <typename Resp>
  absl::StatusOr<Resp> Call(const Request& req) {
    auto payload = CallRaw(RequestOp(req), EncodeRequest(req));
    if (!payload.ok()) return payload.status();
    Resp resp;
    if (auto s = Decode(*payload, &resp); !s.ok()) return s;
    return resp;
  }

  /// The leader's address, once one was found ("" before).
  std::string leader() const;

 private:
  MasterClient(std::vector<std::string> masters, std::optional<EtcdEndpoints> etcd,
               std::string client_name, std::chrono::milliseconds timeout,
               std::optional<transfer::Credential> credential);
  // One connection and the calls serialised on it.
  struct Lane {
    mutable common::Mutex mu;
    std::unique_ptr<RpcConnection> conn ABSL_GUARDED_BY(mu);
  };
  absl::StatusOr<std::string> CallRaw(Op op, const std::string& body);
  absl::Status ResolveLocked(Lane& lane, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);

  const std::vector<std::string> masters_;
  const std::optional<EtcdEndpoints> etcd_;
  const std::string client_name_;
  const std::chrono::milliseconds timeout_;
  const std::optional<transfer::Credential> credential_;  // Empty: --auth none.
  Lane calls_;                                            // every call but WaitKeys
  Lane waits_;                                            // WaitKeys
};

}  // namespace kvgate::store
