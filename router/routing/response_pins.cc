#include "router/routing/response_pins.h"

#include <algorithm>
#include <atomic>

#include "common/mutex.h"
#include "xxhash.h"

namespace kvgate::router {

namespace {
constexpr size_t kShards = 16;
// absl::string_view is not std::string_view in Debian's Abseil build.
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }
}  // namespace

struct ResponsePins::Shard {
  struct Entry {
    Pin pin;
    Clock::time_point expires;
    std::list<std::string>::iterator lru;  // position in `order` (front: most recent)
  };
  mutable common::Mutex mu;
  // The list owns each id once; the map's key is a copy, so that rehashing never moves what
  // the list points at.
  absl::flat_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
  std::list<std::string> order ABSL_GUARDED_BY(mu);
  size_t max ABSL_GUARDED_BY(mu) = 1;
  std::chrono::seconds ttl ABSL_GUARDED_BY(mu){1};
  size_t id_bytes ABSL_GUARDED_BY(mu) = 0;
  std::atomic<uint64_t> evicted{0};

  void Erase(absl::flat_hash_map<std::string, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    id_bytes -= 2 * it->first.capacity();
    order.erase(it->second.lru);
    entries.erase(it);
  }
};

ResponsePins::ResponsePins(size_t max_pins, std::chrono::seconds ttl) {
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>());
  Configure(max_pins, ttl);
}

ResponsePins::~ResponsePins() = default;

void ResponsePins::Configure(size_t max_pins, std::chrono::seconds ttl) {
  const size_t per_shard = std::max<size_t>(1, (max_pins + kShards - 1) / kShards);
  for (auto& s : shards_) {
    common::MutexLock lock(&s->mu);
    s->max = per_shard;
    s->ttl = std::max(ttl, std::chrono::seconds(1));
  }
}

ResponsePins::Shard& ResponsePins::ShardOf(std::string_view id) const {
  return *shards_[XXH3_64bits(id.data(), id.size()) % kShards];
}

std::vector<std::pair<std::string, uint32_t>> ResponsePins::Live(Clock::time_point now) const {
  std::vector<std::pair<std::string, uint32_t>> out;
  for (const auto& s : shards_) {
    common::MutexLock lock(&s->mu);
    // Least recently used first, so that Learn()ing them in turn keeps their order.
    for (auto it = s->order.rbegin(); it != s->order.rend(); ++it) {
      const auto e = s->entries.find(*it);
      if (e->second.expires > now) out.emplace_back(*it, e->second.pin.worker_id);
    }
  }
  return out;
}

void ResponsePins::Learn(std::string_view response_id, uint32_t worker_id, Clock::time_point now) {
  if (response_id.empty() || response_id.size() > kMaxIdBytes) return;
  Shard& s = ShardOf(response_id);
  common::MutexLock lock(&s.mu);
  if (auto it = s.entries.find(Key(response_id)); it != s.entries.end()) s.Erase(it);
  // Expired pins at the cold end go first, then the least recently used beyond the bound.
  while (!s.order.empty()) {
    auto cold = s.entries.find(s.order.back());
    if (s.entries.size() < s.max && cold->second.expires > now) break;
    s.Erase(cold);
    s.evicted.fetch_add(1, std::memory_order_relaxed);
  }
  s.order.emplace_front(response_id);
  Shard::Entry e;
  e.pin.worker_id = worker_id;
  e.expires = now + s.ttl;
  e.lru = s.order.begin();
  auto [it, inserted] = s.entries.emplace(std::string(response_id), std::move(e));
  s.id_bytes += 2 * it->first.capacity();
}

std::optional<ResponsePins::Pin> ResponsePins::Find(std::string_view response_id,
                                                    Clock::time_point now) {
  if (response_id.empty() || response_id.size() > kMaxIdBytes) return std::nullopt;
  Shard& s = ShardOf(response_id);
  common::MutexLock lock(&s.mu);
  auto it = s.entries.find(Key(response_id));
  if (it == s.entries.end()) return std::nullopt;
  if (it->second.expires <= now) {
    s.Erase(it);
    s.evicted.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  it->second.expires = now + s.ttl;
  s.order.splice(s.order.begin(), s.order, it->second.lru);
  return it->second.pin;
}

void ResponsePins::Forget(std::string_view response_id) {
  Shard& s = ShardOf(response_id);
  common::MutexLock lock(&s.mu);
  if (auto it = s.entries.find(Key(response_id)); it != s.entries.end()) s.Erase(it);
}

size_t ResponsePins::size() const {
  size_t n = 0;
  for (const auto& s : shards_) {
    common::MutexLock lock(&s->mu);
    n += s->entries.size();
  }
  return n;
}

size_t ResponsePins::memory_bytes() const {
  // A list node holds two pointers and a string, a map slot a string, an Entry and a control
  // byte; plus each id's two heap copies (id_bytes).
  constexpr size_t kNode = 2 * sizeof(void*) + sizeof(std::string);
  constexpr size_t kSlot = sizeof(std::string) + sizeof(Shard::Entry) + 1;
  size_t bytes = 0;
  for (const auto& s : shards_) {
    common::MutexLock lock(&s->mu);
    bytes += s->entries.capacity() * kSlot + s->order.size() * kNode + s->id_bytes;
  }
  return bytes;
}

uint64_t ResponsePins::evicted() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->evicted.load(std::memory_order_relaxed);
  return n;
}

}  // namespace kvgate::router
