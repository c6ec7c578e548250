// File: store/master.h
// The store's metadata: which data nodes exist (their pools, found by heartbeats), which objects
// are stored where, leases, pins, in-flight puts and eviction. Data never passes through it.
// Semantics are Mooncake Store's (docs/store.md): objects are immutable once committed; a put is
// start (allocate) -> the client WRITEs through transfer/ -> end (commit, or revoke on failure);
// a second put of a key being written is told so and waits for the first (no duplicate
// in-flight writes); committed objects are evicted least recently used first — by Tick() above
// the high watermark, by a put that finds no room — down to the low watermark, skipping leased
// and in-flight ones, pinned ones only when nothing else is left.
// Thread-safe: every method takes the one mutex (WaitKeys waits on it without holding it).
// common/mutex.h's mutex rather than absl::Mutex, which TSan cannot see in Debian's build.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "store/range_allocator.h"
#include "store/sharded_map.h"
#include "store/wire.h"

namespace kvgate::store {

struct MasterOptions {
  std::string name = "master";
  double high_watermark = 0.95;  // Of each node's pool; eviction starts above it...
  double low_watermark = 0.85;   // ...and stops below this.
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds node_timeout{2000};  // A node silent this long is gone.
  std::chrono::milliseconds put_timeout{30000};  // An unfinished put is revoked after this.
  std::chrono::milliseconds default_get_lease{5000};
  std::chrono::milliseconds max_lease{600000};
};

/// Receives what the store's KV events publish; called with the master's lock held, so
/// implementations only queue.
class StoreEventSink {
 public:
  virtual ~StoreEventSink() = default;
  virtual void Stored(const ObjectKey& key, std::optional<uint64_t> parent,
                      const std::vector<uint32_t>& token_ids) = 0;
  virtual void Removed(const ObjectKey& key) = 0;
};

struct NodeUsage {
  std::string name;
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t objects = 0;
};

struct MasterStats {
  uint64_t objects = 0;  // Committed.
  uint64_t bytes = 0;    // Committed, one replica counted per copy.
  uint64_t in_flight_puts = 0;
  uint64_t leased = 0;
  uint64_t pinned = 0;
  uint64_t capacity = 0;
  // Counters since start.
  uint64_t exists_hits = 0, exists_misses = 0;
  uint64_t get_hits = 0, get_misses = 0;
  uint64_t puts_committed = 0, puts_revoked = 0, puts_expired = 0;
  uint64_t put_dedups_present = 0, put_dedups_in_flight = 0, put_no_space = 0;
  uint64_t evictions = 0, evicted_bytes = 0, removes = 0;
  uint64_t nodes_lost = 0, objects_lost = 0;
  std::vector<NodeUsage> nodes;
};

class Master {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Master(MasterOptions options, StoreEventSink* events = nullptr);

  /// A data node joins (or re-joins after a failover with the objects it holds, which become
  /// committed objects again). @return kInvalidArgument for a zero capacity.
  absl::StatusOr<RegisterNodeResponse> RegisterNode(const RegisterNodeRequest& req);
  /// @return kNotFound when the node is unknown to this master or its epoch is stale: it must
  /// register again (with its objects).
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& req);

  /// @return kResourceExhausted past kMaxUnregisteredSegments names no registered node has.
  absl::Status PublishSegment(const PublishSegmentRequest& req);
  absl::StatusOr<LookupSegmentResponse> LookupSegment(const LookupSegmentRequest& req) const;

  ExistsResponse Exists(const ExistsRequest& req);
  PutStartResponse PutStart(const PutStartRequest& req);
  KeyCodesResponse PutEnd(const PutEndRequest& req);
  /// Waits until none of `keys` is being written, or the time-out: kOk (stored), kNotFound, or
  /// kInFlight (still being written at the time-out).
  KeyCodesResponse WaitKeys(const WaitKeysRequest& req);
  GetResponse Get(const GetRequest& req);
  KeyCodesResponse Remove(const RemoveRequest& req);
  KeyCodesResponse Pin(const PinRequest& req);

  /// Drops nodes that missed their heartbeats (their objects with them) and revokes puts past
  /// their time-out. Called periodically by the server.
  void Tick();

  MasterStats Stats() const;
  const MasterOptions& options() const { return options_; }

 private:
  enum class State : uint8_t { kWriting, kCommitted };
  struct Placement {
    std::string node;
    uint64_t offset = 0;
  };
  struct Object {
    State state = State::kWriting;
    std::vector<uint64_t> slices;
    uint64_t size = 0;
    uint64_t checksum = 0;
    std::vector<Placement> placements;
    uint64_t put_id = 0;
    Clock::time_point put_deadline;
    Clock::time_point lease_until;
    bool pinned = false;
    std::list<ObjectKey>::iterator lru;  // In lru_ or pinned_lru_ once committed.
    std::optional<uint64_t> parent;      // For the Stored event only.
    std::vector<uint32_t> token_ids;
  };
  struct Node {
    std::string host_id;
    uint64_t base = 0;
    RangeAllocator alloc{0};
    uint64_t epoch = 0;
    Clock::time_point last_heartbeat;
    uint64_t objects = 0;
    HeartbeatResponse journal;  // Changes the node has not yet been told about.
  };
  // The shard from the key's block hash alone (already uniform), mixed: hashing the namespace
  // string as well made a 20,000-key exists 12-14% slower than one map; this, 3-10%.
  struct ObjectShard {
    uint64_t operator()(const ObjectKey& k) const { return k.hash * 0x9E3779B97F4A7C15ULL; }
  };
  using ObjectMap = ShardedMap<ObjectKey, Object, 256, ObjectShard>;

  bool Leased(const Object& o, Clock::time_point now) const { return o.lease_until > now; }
  void Lease(Object& o, Clock::time_point now, std::chrono::milliseconds ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(Object& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Replica> Replicas(const Object& o, const std::string& preferred) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Allocates `size` bytes on `count` distinct nodes, preferred first then by free ratio,
  /// evicting where needed. Empty when it cannot.
  std::vector<Placement> Place(uint64_t size, const std::string& preferred, uint32_t count,
                               Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Evicts from `node` until `need` more bytes fit under the low watermark (or, for `need`
  /// above it, until `need` fits). @return whether `need` bytes can now be allocated there.
  bool EvictFor(const std::string& node, uint64_t need, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Commit(const ObjectKey& key, Object& o, uint64_t checksum)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Frees the object's ranges, tells its nodes, publishes Removed when it was committed, and
  /// erases it. `it` is invalid afterwards.
  void Erase(ObjectMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropNode(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MasterOptions options_;
  StoreEventSink* const events_;
  mutable common::Mutex mu_;
  common::CondVar settled_;  // Signalled when a put commits or is revoked.
  std::map<std::string, Node> nodes_ ABSL_GUARDED_BY(mu_);
  ObjectMap objects_ ABSL_GUARDED_BY(mu_);
  // Every put started in the last put_timeout, in deadline order (each gets now + put_timeout),
  // so that Tick visits the puts that may have expired, not every object, under the mutex
  // every lookup needs (walking them all was 16% of kvgate-store's CPU samples in an agentic
  // store replay, issue 30). An entry whose put ended is dropped when its deadline passes: one
  // entry (a key and 16 bytes) per put of the last put_timeout.
  struct PendingPut {
    Clock::time_point deadline;
    ObjectKey key;
    uint64_t put_id = 0;
  };
  std::deque<PendingPut> pending_puts_ ABSL_GUARDED_BY(mu_);
  std::list<ObjectKey> lru_ ABSL_GUARDED_BY(mu_);         // Front: most recently used.
  std::list<ObjectKey> pinned_lru_ ABSL_GUARDED_BY(mu_);  // Evicted only when lru_ has none.
  absl::flat_hash_map<std::string, std::string> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t next_put_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  MasterStats counters_ ABSL_GUARDED_BY(mu_);  // Only the counters are kept current.
};

}  // namespace kvgate::store
