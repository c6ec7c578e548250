// File: router/cluster/cluster_sync.h
// Replica sync (issue 29, docs/scale-out.md): kvgate replicas that share a Redis and a cluster
// name route as one. Each replica publishes, asynchronously, what the others must know:
//   - its reservations per worker (a load table when they change and in full every heartbeat),
//     which the others add to their own: every replica sees the fleet's whole load;
//   - approximate-mode learning (chains as block hashes) and the corrections from engines'
//     reported cached tokens: every replica predicts the same holders;
//   - OpenAI Responses pins and admin drains.
// It applies the others' messages as they arrive. Frames are numbered: a gap is counted and
// the sender is asked for a snapshot (its index, pins and drains, written to a Redis key),
// which every replica merges. A joining replica, or one whose link came back, loads the
// snapshots kept in Redis (rewritten every snapshot_interval_ms) before it goes on, so it
// routes well from its first request, asks every peer for a fresh one, and publishes its own
// for the others to merge. A replica silent for peer_timeout_ms is gone with its
// reservations. With Redis down, each replica routes on its own: /ready stays 200, the
// `kvgate_cluster_connected` gauge is 0 and a log line says so; links are retried with
// backoff. Nothing here runs on a gateway thread: the sink methods only queue. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "config/config.h"
#include "router/cluster/cluster_message.h"
#include "router/cluster/peer_table.h"
#include "router/routing/cluster_sink.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace kvgate::router {

struct GatewayState;
struct Snapshot;

namespace cluster {

class RedisLink;

class ClusterSync final : public ClusterSink {
 public:
  /// `config.enabled()` must hold; `state` must outlive this.
  ClusterSync(const config::ClusterConfig& config, GatewayState& state);
  ~ClusterSync() override;

  /// Connects and loads the peers' snapshots (bounded by connect_timeout_ms per step), then
  /// starts the publishing and subscribing threads. Never fails: without Redis the replica
  /// starts alone and keeps trying.
  void Start();
  /// Says goodbye (the others drop this replica's load at once) and stops the threads.
  void Stop();

  // ClusterSink: queue only.
  void LoadChanged() override;
  void Learned(const Worker& worker, absl::Span<const kvindex::BlockHash> chain,
               uint32_t prompt_tokens) override;
  void Forgot(const Worker& worker, absl::Span<const kvindex::BlockHash> blocks) override;
  void Pinned(std::string_view response_id, const Worker& worker) override;
  void Unpinned(std::string_view response_id) override;
  void Drained(const Worker& worker, bool draining) override;
  std::string StatusJson() const override;

  uint64_t id() const { return id_; }
  const std::string& replica() const { return replica_; }
  bool connected() const;

  /// Applies one frame as if it came from the channel (the subscriber; tests).
  void Apply(std::string_view bytes);

 private:
  struct Metrics;
  using Clock = std::chrono::steady_clock;

  void Queue(std::string record);
  void PublishLoop();
  void SubscribeLoop();
  // Publisher steps, on its thread.
  bool EnsurePublisher(Clock::time_point now);
  void Rejoin();
  void PublishDue(Clock::time_point now);
  void WriteSnapshot(bool merge_now);
  void MergeSnapshotKey(const std::string& key);
  void ExpirePeers(Clock::time_point now);
  void LinkFailed(const absl::Status& status, std::unique_ptr<RedisLink>& link,
                  std::atomic<bool>& up, const char* which);
  void LinkUp(std::atomic<bool>& up, const char* which);
  void RequestRejoin();
  // Asks `replica` (0: every replica) to publish a fresh snapshot, merged by all.
  void RequestSnapshot(uint64_t replica);
  // Appliers, on the subscriber's thread (and Rejoin's).
  void ApplyRecord(const Snapshot& fleet, const Frame& frame, const Record& rec,
                   bool from_snapshot);
  void MergeSnapshot(std::string_view bytes);
  void RefreshRemoteLoads();
  std::string SnapshotKey(uint64_t replica) const;
  std::string LoadsRecord(bool full, int64_t changed_unix_us) const;

  const config::ClusterConfig config_;
  GatewayState& state_;
  const uint64_t id_;
  const std::string replica_;
  const std::string channel_;
  const std::string snapshot_prefix_;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<Metrics> metrics_;

  mutable common::Mutex out_mu_;
  common::CondVar out_cv_;
  std::vector<std::pair<std::string, uint32_t>> out_ ABSL_GUARDED_BY(out_mu_);  // frames' records
  size_t out_bytes_ ABSL_GUARDED_BY(out_mu_) = 0;
  bool load_dirty_ ABSL_GUARDED_BY(out_mu_) = false;
  int64_t load_changed_unix_us_ ABSL_GUARDED_BY(out_mu_) = 0;
  bool need_rejoin_ ABSL_GUARDED_BY(out_mu_) = true;
  bool snapshot_due_ ABSL_GUARDED_BY(out_mu_) = false;  // a peer asked for this replica's
  absl::flat_hash_set<std::string> merge_keys_ ABSL_GUARDED_BY(out_mu_);  // to GET and merge
  bool stopping_ ABSL_GUARDED_BY(out_mu_) = false;

  mutable common::Mutex peers_mu_;
  PeerTable peers_ ABSL_GUARDED_BY(peers_mu_);

  std::unique_ptr<RedisLink> publisher_;  // the publishing thread's (Start's before it runs)
  std::atomic<bool> stop_{false};
  std::atomic<bool> pub_up_{false};
  std::atomic<bool> sub_up_{false};
  std::atomic<bool> sub_ready_{false};  // subscribed at least once (Start waits for it)
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> last_heard_unix_us_{0};
  std::atomic<int64_t> last_snapshot_merged_unix_us_{0};
  std::atomic<int64_t> last_lag_us_{-1};
  std::thread pub_thread_;
  std::thread sub_thread_;
};

}  // namespace cluster
}  // namespace kvgate::router
