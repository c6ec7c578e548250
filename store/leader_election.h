// File: store/leader_election.h
// High availability of the master through etcd (its v3 JSON gateway): every master campaigns
// for one key, "<prefix>/store/leader", created under an etcd lease it keeps alive; the one whose
// create succeeds is the leader and writes its address there. When the leader dies its lease
// expires (TTL seconds) and a standby's next attempt wins. Clients and data nodes read the key
// to find the leader (ReadLeader). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvgate::store {

struct EtcdEndpoints {
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  std::string prefix = "kvgate";
};

/// Parses "etcd://host:port[,host:port...][/prefix]". @return kInvalidArgument naming the URI.
absl::StatusOr<EtcdEndpoints> ParseEtcdUri(std::string_view uri);

/// The address the current leader published. @return kNotFound when there is none (an
/// election in progress), kUnavailable when etcd cannot be reached.
absl::StatusOr<std::string> ReadLeader(const EtcdEndpoints& etcd);

class LeaderElection {
 public:
  /// Campaigns in a background thread; `on_change(true)` runs when this master becomes leader,
  /// `on_change(false)` when it loses the lease (it must then stop serving as leader).
  LeaderElection(EtcdEndpoints etcd, std::string address, uint32_t ttl_s,
                 std::function<void(bool)> on_change);
  /// Resigns (revokes the lease, so a standby takes over at once) and stops.
  ~LeaderElection();

  bool is_leader() const { return leader_.load(); }

 private:
  void Run();
  bool Campaign();  // One attempt; true when this master now holds the key.
  bool KeepAlive();

  const EtcdEndpoints etcd_;
  const std::string address_;
  const uint32_t ttl_s_;
  const std::function<void(bool)> on_change_;
  std::atomic<bool> leader_{false};
  int64_t lease_ = 0;  // Election thread only.
  common::Mutex mu_;
  common::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvgate::store
