// File: store/master.cc
#include "store/master.h"

#include <algorithm>

#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {
namespace {

constexpr uint64_t kMaxObjectBytes = 1ull << 36;  // 64 GiB: far above any KV block.

// Sum of the slices, or nullopt when empty, a slice is zero or the sum overflows the bound.
std::optional<uint64_t> ObjectSize(const std::vector<uint64_t>& slices) {
  if (slices.empty() || slices.size() > 64) return std::nullopt;
  uint64_t total = 0;
  for (uint64_t s : slices) {
    if (s == 0 || s > kMaxObjectBytes - total) return std::nullopt;
    total += s;
  }
  return total;
}

// The pool bytes an object is charged: its size, or what it costs the master's memory when that
// is more (the key's namespace is held twice, in the map and in the LRU list). Tiny objects
// under 4 KB namespaces once cost the master 221x the pool they filled; charged this way, the
// master's metadata stays within the pools' size, and eviction bounds it as it bounds bytes.
// Real KV blocks (tens of KiB and up) are charged their size.
uint64_t Charge(const ObjectKey& key, uint64_t size) {
  constexpr uint64_t kPerObjectBytes = 256;  // The Object, its map slot and its list node.
  return std::max<uint64_t>(size, 2 * key.ns.size() + kPerObjectBytes);
}

}  // namespace

Master::Master(MasterOptions options, StoreEventSink* events)
    : options_(std::move(options)), events_(events) {}

absl::StatusOr<RegisterNodeResponse> Master::RegisterNode(const RegisterNodeRequest& req) {
  if (req.capacity < RangeAllocator::kAlignment || req.node.empty())
    return absl::InvalidArgumentError(
        common::StrCat("register_node: node '", req.node, "' needs a name and a capacity"));
  common::MutexLock lock(&mu_);
  if (nodes_.count(req.node) > 0) DropNode(req.node);  // A restarted node: its memory is new.
  Node& node = nodes_[req.node];
  node.host_id = req.host_id;
  node.base = req.base;
  node.alloc = RangeAllocator(req.capacity);
  node.epoch = next_epoch_++;
  node.last_heartbeat = Clock::now();
  size_t restored = 0;
  for (const NodeObject& o : req.objects) {
    auto size = ObjectSize(o.slices);
    if (!size || !node.alloc.AllocateAt(o.offset, Charge(o.key, *size))) continue;
    auto [it, inserted] = objects_.try_emplace(o.key);
    Object& obj = it->second;
    if (!inserted && (obj.state != State::kCommitted || obj.size != *size)) {
      node.alloc.Release(o.offset, Charge(o.key, *size));
      continue;
    }
    if (inserted) {
      obj.state = State::kCommitted;
      obj.slices = o.slices;
      obj.size = *size;
      obj.checksum = o.checksum;
      obj.pinned = o.pinned;
      auto& list = obj.pinned ? pinned_lru_ : lru_;
      list.push_back(o.key);
      obj.lru = std::prev(list.end());
    }
    obj.placements.push_back({req.node, o.offset});
    ++node.objects;
    ++restored;
  }
  spdlog::info("store: data node {} registered ({} bytes, {} objects restored, epoch {})", req.node,
               req.capacity, restored, node.epoch);
  return RegisterNodeResponse{node.epoch,
                              static_cast<uint32_t>(options_.heartbeat_interval.count())};
}

absl::StatusOr<HeartbeatResponse> Master::Heartbeat(const HeartbeatRequest& req) {
  common::MutexLock lock(&mu_);
  auto it = nodes_.find(req.node);
  if (it == nodes_.end() || it->second.epoch != req.epoch)
    return absl::NotFoundError(
        common::StrCat("heartbeat: node '", req.node, "' is not registered with this master"));
  it->second.last_heartbeat = Clock::now();
  return std::exchange(it->second.journal, {});
}

absl::Status Master::PublishSegment(const PublishSegmentRequest& req) {
  common::MutexLock lock(&mu_);
  if (!segments_.contains(req.name) && !nodes_.contains(req.name)) {
    size_t unregistered = 0;
    for (const auto& [name, json] : segments_) unregistered += nodes_.contains(name) ? 0 : 1;
    if (unregistered >= kMaxUnregisteredSegments)
      return absl::ResourceExhaustedError(common::StrCat(
          "store: ", unregistered, " segments are published by no registered node; register '",
          req.name, "' first"));
  }
  segments_[req.name] = req.json;
  return absl::OkStatus();
}

absl::StatusOr<LookupSegmentResponse> Master::LookupSegment(const LookupSegmentRequest& req) const {
  common::MutexLock lock(&mu_);
  auto it = segments_.find(req.name);
  if (it == segments_.end())
    return absl::NotFoundError(common::StrCat("segment '", req.name, "' is not published"));
  return LookupSegmentResponse{it->second};
}

void Master::Lease(Object& o, Clock::time_point now, std::chrono::milliseconds ms) {
  ms = std::min(ms, options_.max_lease);
  o.lease_until = std::max(o.lease_until, now + ms);
}

void Master::Touch(Object& o) {
  auto& list = o.pinned ? pinned_lru_ : lru_;
  list.splice(list.begin(), list, o.lru);
}

std::vector<Replica> Master::Replicas(const Object& o, const std::string& preferred) const {
  std::vector<Replica> out;
  for (const Placement& p : o.placements) {
    auto n = nodes_.find(p.node);
    if (n == nodes_.end()) continue;
    out.push_back({p.node, n->second.base + p.offset});
    if (!preferred.empty() && (p.node == preferred || n->second.host_id == preferred))
      std::swap(out.front(), out.back());
  }
  return out;
}

ExistsResponse Master::Exists(const ExistsRequest& req) {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  ExistsResponse out;
  out.codes.reserve(req.keys.size());
  for (const ObjectKey& key : req.keys) {
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.state != State::kCommitted) {
      ++counters_.exists_misses;
      out.codes.push_back(KeyCode::kNotFound);
      if (req.stop_at_first_miss) break;
      continue;
    }
    ++counters_.exists_hits;
    if (req.lease_ms > 0) Lease(it->second, now, std::chrono::milliseconds(req.lease_ms));
    out.codes.push_back(KeyCode::kOk);
  }
  return out;
}

PutStartResponse Master::PutStart(const PutStartRequest& req) {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  PutStartResponse out;
  out.items.reserve(req.items.size());
  for (const PutItem& item : req.items) {
    PutStartItemResult& r = out.items.emplace_back();
    auto it = objects_.find(item.key);
    if (it != objects_.end()) {
      if (it->second.state == State::kCommitted) {
        ++counters_.put_dedups_present;
        Touch(it->second);
        r.code = KeyCode::kPresent;
      } else {
        ++counters_.put_dedups_in_flight;
        r.code = KeyCode::kInFlight;
      }
      continue;
    }
    auto size = ObjectSize(item.slices);
    if (!size) {
      r.code = KeyCode::kInvalid;
      continue;
    }
    std::vector<Placement> placements = Place(Charge(item.key, *size), req.preferred_node,
                                              std::max<uint32_t>(1, req.replicas), now);
    if (placements.empty()) {
      ++counters_.put_no_space;
      r.code = KeyCode::kNoSpace;
      continue;
    }
    Object& o = objects_[item.key];
    o.state = State::kWriting;
    o.slices = item.slices;
    o.size = *size;
    o.placements = std::move(placements);
    o.put_id = next_put_id_++;
    o.put_deadline = now + options_.put_timeout;
    pending_puts_.push_back({o.put_deadline, item.key, o.put_id});
    o.parent = item.parent;
    o.token_ids = item.token_ids;
    for (const Placement& p : o.placements) ++nodes_[p.node].objects;
    r.code = KeyCode::kOk;
    r.put_id = o.put_id;
    r.replicas = Replicas(o, req.preferred_node);
  }
  return out;
}

std::vector<Master::Placement> Master::Place(uint64_t size, const std::string& preferred,
                                             uint32_t count, Clock::time_point now) {
  // Candidates: the preferred node first, then the others by free ratio, largest first.
  // Local nodes (several when a host runs more than one) are also ordered by free ratio.
  struct Candidate {
    bool local;
    double free_ratio;
    const std::string* name;
  };
  std::vector<Candidate> order;
  for (const auto& [name, node] : nodes_) {
    const double cap = static_cast<double>(node.alloc.capacity());
    const double free_ratio = cap > 0 ? 1.0 - static_cast<double>(node.alloc.used()) / cap : 0;
    const bool local = !preferred.empty() && (name == preferred || node.host_id == preferred);
    order.push_back({local, free_ratio, &name});
  }
  std::sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) {
    if (a.local != b.local) return a.local;
    if (a.free_ratio != b.free_ratio) return a.free_ratio > b.free_ratio;
    return *a.name < *b.name;
  });
  std::vector<Placement> out;
  for (const Candidate& c : order) {
    const std::string* name = c.name;
    if (out.size() == count) break;
    Node& node = nodes_[*name];
    if (RangeAllocator::Rounded(size) > node.alloc.capacity()) continue;
    std::optional<uint64_t> offset = node.alloc.Allocate(size);
    if (!offset && EvictFor(*name, size, now)) offset = node.alloc.Allocate(size);
    if (!offset) continue;
    out.push_back({*name, *offset});
  }
  if (out.size() < std::min<size_t>(count, nodes_.size()) || out.empty()) {
    for (const Placement& p : out) nodes_[p.node].alloc.Release(p.offset, size);
    return {};
  }
  return out;
}

bool Master::EvictFor(const std::string& node_name, uint64_t need, Clock::time_point now) {
  Node& node = nodes_[node_name];
  // Down to the low watermark, so that the next puts find room without evicting again; an
  // object larger than that needs only its own room.
  const double rounded = static_cast<double>(RangeAllocator::Rounded(need));
  const double target =
      std::max(options_.low_watermark * static_cast<double>(node.alloc.capacity()), rounded);
  auto done = [&] { return static_cast<double>(node.alloc.used()) + rounded <= target; };
  // Least recently used first; pinned objects only once no unpinned one is left.
  for (std::list<ObjectKey>* list : {&lru_, &pinned_lru_}) {
    for (auto k = list->end(); k != list->begin() && !done();) {
      --k;
      auto it = objects_.find(*k);
      const Object& o = it->second;
      const bool here = std::any_of(o.placements.begin(), o.placements.end(),
                                    [&](const Placement& p) { return p.node == node_name; });
      if (!here || Leased(o, now)) continue;
      ++counters_.evictions;
      counters_.evicted_bytes += o.size;
      k = std::next(k);  // Erase() unlinks the entry under the cursor.
      Erase(it);
    }
  }
  if (need == 0) return true;
  std::optional<uint64_t> probe = node.alloc.Allocate(need);
  if (probe) node.alloc.Release(*probe, need);
  return probe.has_value();
}

void Master::Commit(const ObjectKey& key, Object& o, uint64_t checksum) {
  o.state = State::kCommitted;
  o.checksum = checksum;
  auto& list = o.pinned ? pinned_lru_ : lru_;
  list.push_front(key);
  o.lru = list.begin();
  for (const Placement& p : o.placements)
    nodes_[p.node].journal.added.push_back({key, p.offset, o.slices, checksum, o.pinned});
  ++counters_.puts_committed;
  if (events_ != nullptr) events_->Stored(key, o.parent, o.token_ids);
  o.token_ids.clear();
  o.token_ids.shrink_to_fit();
}

KeyCodesResponse Master::PutEnd(const PutEndRequest& req) {
  common::MutexLock lock(&mu_);
  KeyCodesResponse out;
  out.codes.reserve(req.items.size());
  for (const PutEndItem& item : req.items) {
    auto it = objects_.find(item.key);
    if (it == objects_.end() || it->second.state != State::kWriting ||
        it->second.put_id != item.put_id) {
      out.codes.push_back(KeyCode::kInvalid);  // Expired, or its node was lost.
      continue;
    }
    if (item.ok) {
      Commit(it->first, it->second, item.checksum);
    } else {
      ++counters_.puts_revoked;
      Erase(it);
    }
    out.codes.push_back(KeyCode::kOk);
  }
  settled_.SignalAll();
  return out;
}

KeyCodesResponse Master::WaitKeys(const WaitKeysRequest& req) {
  // Bounded so that a client cannot park a connection thread for long.
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::min(req.timeout_ms, 60000u));
  common::MutexLock lock(&mu_);
  KeyCodesResponse out;
  for (;;) {
    out.codes.clear();
    bool writing = false;
    for (const ObjectKey& key : req.keys) {
      auto it = objects_.find(key);
      KeyCode c = KeyCode::kNotFound;
      if (it != objects_.end())
        c = it->second.state == State::kCommitted ? KeyCode::kOk : KeyCode::kInFlight;
      writing |= c == KeyCode::kInFlight;
      out.codes.push_back(c);
    }
    if (!writing || settled_.WaitUntil(&mu_, deadline)) break;
  }
  if (Clock::now() >= deadline) {
    // One last look after the time-out, so that a commit racing the deadline is seen.
    for (size_t i = 0; i < req.keys.size(); ++i) {
      auto it = objects_.find(req.keys[i]);
      if (it != objects_.end() && it->second.state == State::kCommitted)
        out.codes[i] = KeyCode::kOk;
    }
  }
  return out;
}

GetResponse Master::Get(const GetRequest& req) {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  const auto lease =
      req.lease_ms > 0 ? std::chrono::milliseconds(req.lease_ms) : options_.default_get_lease;
  GetResponse out;
  out.items.reserve(req.keys.size());
  for (const ObjectKey& key : req.keys) {
    GetItemResult& r = out.items.emplace_back();
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.state != State::kCommitted) {
      ++counters_.get_misses;
      r.code = KeyCode::kNotFound;
      continue;
    }
    ++counters_.get_hits;
    Object& o = it->second;
    Lease(o, now, lease);
    Touch(o);
    r.slices = o.slices;
    r.checksum = o.checksum;
    r.replicas = Replicas(o, req.preferred_node);
  }
  return out;
}

KeyCodesResponse Master::Remove(const RemoveRequest& req) {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  KeyCodesResponse out;
  for (const ObjectKey& key : req.keys) {
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      out.codes.push_back(KeyCode::kNotFound);
    } else if (it->second.state != State::kCommitted || Leased(it->second, now)) {
      out.codes.push_back(KeyCode::kBusy);
    } else {
      ++counters_.removes;
      Erase(it);
      out.codes.push_back(KeyCode::kOk);
    }
  }
  return out;
}

KeyCodesResponse Master::Pin(const PinRequest& req) {
  common::MutexLock lock(&mu_);
  KeyCodesResponse out;
  for (const ObjectKey& key : req.keys) {
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.state != State::kCommitted) {
      out.codes.push_back(KeyCode::kNotFound);
      continue;
    }
    Object& o = it->second;
    if (o.pinned != req.pinned) {
      auto& from = o.pinned ? pinned_lru_ : lru_;
      auto& to = req.pinned ? pinned_lru_ : lru_;
      to.splice(to.begin(), from, o.lru);
      o.pinned = req.pinned;
    }
    out.codes.push_back(KeyCode::kOk);
  }
  return out;
}

void Master::Erase(ObjectMap::iterator it) {
  Object& o = it->second;
  const bool committed = o.state == State::kCommitted;
  for (const Placement& p : o.placements) {
    auto n = nodes_.find(p.node);
    if (n == nodes_.end()) continue;
    Node& node = n->second;
    node.alloc.Release(p.offset, Charge(it->first, o.size));
    --node.objects;
    if (!committed) continue;
    // A commit the node has not heard of yet is simply withdrawn from its journal.
    auto& added = node.journal.added;
    auto j = std::find_if(added.begin(), added.end(),
                          [&](const NodeObject& x) { return x.offset == p.offset; });
    if (j != added.end()) {
      added.erase(j);
    } else {
      node.journal.removed.push_back(p.offset);
    }
  }
  if (committed) {
    (o.pinned ? pinned_lru_ : lru_).erase(o.lru);
    if (events_ != nullptr) events_->Removed(it->first);
  } else {
    settled_.SignalAll();
  }
  objects_.erase(it);
}

void Master::DropNode(const std::string& name) {
  uint64_t lost = 0;
  for (auto it = objects_.begin(); it != objects_.end();) {
    auto cur = it++;
    auto& pl = cur->second.placements;
    auto p = std::find_if(pl.begin(), pl.end(), [&](const Placement& x) { return x.node == name; });
    if (p == pl.end()) continue;
    pl.erase(p);  // The node's memory is gone: nothing to release there.
    --nodes_[name].objects;
    if (pl.empty()) {
      ++lost;
      Erase(cur);
    }
  }
  nodes_.erase(name);
  segments_.erase(name);
  ++counters_.nodes_lost;
  counters_.objects_lost += lost;
  spdlog::warn("store: data node {} dropped; {} objects lost with it", name, lost);
}

void Master::Tick() {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  std::vector<std::string> dead;
  for (const auto& [name, node] : nodes_)
    if (now - node.last_heartbeat > options_.node_timeout) dead.push_back(name);
  for (const std::string& name : dead) DropNode(name);
  while (!pending_puts_.empty() && pending_puts_.front().deadline < now) {
    const PendingPut p = std::move(pending_puts_.front());
    pending_puts_.pop_front();
    auto it = objects_.find(p.key);
    if (it != objects_.end() && it->second.state == State::kWriting &&
        it->second.put_id == p.put_id) {
      ++counters_.puts_expired;
      Erase(it);
    }
  }
  for (auto& [name, node] : nodes_) {
    const double high = options_.high_watermark * static_cast<double>(node.alloc.capacity());
    if (static_cast<double>(node.alloc.used()) > high) EvictFor(name, 0, now);
  }
}

MasterStats Master::Stats() const {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  MasterStats s = counters_;
  for (const auto& [key, o] : objects_) {
    if (o.state == State::kWriting) {
      ++s.in_flight_puts;
      continue;
    }
    ++s.objects;
    s.bytes += o.size * o.placements.size();
    s.leased += Leased(o, now) ? 1 : 0;
    s.pinned += o.pinned ? 1 : 0;
  }
  for (const auto& [name, node] : nodes_) {
    s.capacity += node.alloc.capacity();
    s.nodes.push_back({name, node.alloc.capacity(), node.alloc.used(), node.objects});
  }
  return s;
}

}  // namespace kvgate::store
