// File: router/cluster/peer_table.h
// What one replica knows of the others: who they are, the last frame number heard from each
// (a gap is a count of lost frames), when each was last heard (a replica silent for the peer
// timeout is gone, and so is the load it had reserved) and each one's reservations per worker,
// summed into the load the others add to this replica's own. Thread-compatible: ClusterSync
// guards it with one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "router/cluster/cluster_message.h"

namespace kvgate::router::cluster {

class PeerTable {
 public:
  using Clock = std::chrono::steady_clock;

  struct Heard {
    bool duplicate = false;  // a frame number already heard: ignore the frame
    bool new_peer = false;
    uint64_t lost = 0;  // frames between the last heard and this one
  };

  struct PeerInfo {
    uint64_t id = 0;
    std::string name;
    uint64_t seq = 0;
    uint64_t frames = 0;
    uint64_t lost = 0;
    Clock::time_point last_heard;
  };

  /// Frame `seq` from `sender` arrived at `now`.
  Heard Hear(uint64_t sender, uint64_t seq, Clock::time_point now);
  void SetName(uint64_t sender, std::string name);
  /// The sender's reservations: `full` replaces its table, else updates the workers named.
  void SetLoads(uint64_t sender, const std::vector<WorkerLoad>& loads, bool full);
  /// Forgets a replica that said goodbye. @return false when it was not known.
  bool Remove(uint64_t sender);
  /// Forgets the replicas silent for `timeout` before `now`. @return their names.
  std::vector<std::string> Expire(Clock::time_point now, std::chrono::milliseconds timeout);

  /// The other replicas' reservations per worker URL, summed.
  absl::flat_hash_map<std::string, LoadSnapshot> Totals() const;
  std::vector<PeerInfo> Peers() const;
  size_t size() const { return peers_.size(); }
  bool Knows(uint64_t sender) const { return peers_.contains(sender); }

 private:
  struct Peer {
    PeerInfo info;
    absl::flat_hash_map<std::string, LoadSnapshot> loads;
  };
  absl::flat_hash_map<uint64_t, Peer> peers_;
};

}  // namespace kvgate::router::cluster
