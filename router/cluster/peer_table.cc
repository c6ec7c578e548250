// File: router/cluster/peer_table.cc
// The other replicas' frame numbers, liveness and reservations (peer_table.h).
#include "router/cluster/peer_table.h"

namespace kvgate::router::cluster {

PeerTable::Heard PeerTable::Hear(uint64_t sender, uint64_t seq, Clock::time_point now) {
  Heard h;
  auto [it, inserted] = peers_.try_emplace(sender);
  PeerInfo& p = it->second.info;
  if (inserted) {
    h.new_peer = true;
    p.id = sender;
  } else if (seq <= p.seq) {
    h.duplicate = true;
    return h;
  } else {
    h.lost = seq - p.seq - 1;
  }
  p.seq = seq;
  p.lost += h.lost;
  ++p.frames;
  p.last_heard = now;
  return h;
}

void PeerTable::SetName(uint64_t sender, std::string name) {
  if (auto it = peers_.find(sender); it != peers_.end()) it->second.info.name = std::move(name);
}

void PeerTable::SetLoads(uint64_t sender, const std::vector<WorkerLoad>& loads, bool full) {
  auto it = peers_.find(sender);
  if (it == peers_.end()) return;
  if (full) it->second.loads.clear();
  for (const WorkerLoad& w : loads) it->second.loads[w.worker] = w.load;
}

bool PeerTable::Remove(uint64_t sender) { return peers_.erase(sender) > 0; }

std::vector<std::string> PeerTable::Expire(Clock::time_point now,
                                           std::chrono::milliseconds timeout) {
  std::vector<std::string> gone;
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now - it->second.info.last_heard > timeout) {
      gone.push_back(it->second.info.name);
      peers_.erase(it++);
    } else {
      ++it;
    }
  }
  return gone;
}

absl::flat_hash_map<std::string, LoadSnapshot> PeerTable::Totals() const {
  absl::flat_hash_map<std::string, LoadSnapshot> out;
  for (const auto& [id, peer] : peers_) {
    for (const auto& [worker, l] : peer.loads) {
      LoadSnapshot& t = out[worker];
      t.in_flight += l.in_flight;
      t.pending_prefill_tokens += l.pending_prefill_tokens;
      t.active_decode += l.active_decode;
      t.active_kv_blocks += l.active_kv_blocks;
    }
  }
  return out;
}

std::vector<PeerTable::PeerInfo> PeerTable::Peers() const {
  std::vector<PeerInfo> out;
  for (const auto& [id, peer] : peers_) out.push_back(peer.info);
  return out;
}

}  // namespace kvgate::router::cluster
