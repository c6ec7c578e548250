#include "kvindex/prefix_reuse.h"

#include <algorithm>
#include <unordered_map>

#include "kvindex/canonicalize.h"

// The library's runtime-dispatched XXH3 (AVX2 where the CPU has it): proving a reused prefix
// hashes the body's bytes, 0.74 instructions a byte with the SSE2 kernel.
#include "xxh_x86dispatch.h"
#include "xxhash.h"

namespace kvgate::kvindex {
namespace {

// Two entries are the same conversation when their first messages are: the newer replaces it.
constexpr size_t kSameConversationMessages = 3;

bool SameConversation(const ReusablePrefix& a, const ReusablePrefix& b) {
  const size_t n =
      std::min({a.segment_hashes.size(), b.segment_hashes.size(), kSameConversationMessages});
  return n > 0 && std::equal(a.segment_hashes.begin(), a.segment_hashes.begin() + n,
                             b.segment_hashes.begin());
}

}  // namespace

bool ReusablePrefix::CanonicalStartsWith(std::string_view bytes) const {
  if (bytes.size() > canonical_size) return false;
  size_t at = 0;
  for (const Piece& p : canonical) {
    if (at >= bytes.size()) break;
    const size_t n = std::min(p.size, bytes.size() - at);
    if (std::string_view(*p.bytes).substr(0, n) != bytes.substr(at, n)) return false;
    at += n;
  }
  return true;
}

void ReusablePrefix::KeepCanonical(const CanonicalPrompt& prompt, const ReusablePrefix* prev,
                                   size_t reused) {
  canonical.clear();
  canonical_size = prompt.size();
  size_t shared = 0;
  if (prev != nullptr && reused > 0) {
    for (const Piece& p : prev->canonical) {
      if (shared >= reused) break;
      canonical.push_back(Piece{p.bytes, std::min(p.size, reused - shared)});
      shared += canonical.back().size;
    }
  }
  if (canonical.size() >= kMaxPieces) {  // join them: one copy now and then
    canonical.clear();
    shared = 0;
  }
  if (shared < prompt.size() || canonical.empty()) {
    canonical.push_back(
        Piece{std::make_shared<const std::string>(prompt.From(shared)), prompt.size() - shared});
  }
}

PrefixReuseCache::PrefixReuseCache(size_t max_bytes) : max_bytes_(max_bytes) {}

uint64_t PrefixReuseCache::KeyOf(std::string_view body, uint8_t api) {
  return XXH3_64bits_withSeed_dispatch(body.data(), std::min(body.size(), kKeyBytes), api);
}

uint64_t SegmentHash(std::string_view body, size_t begin, size_t end) {
  return XXH3_64bits_dispatch(body.data() + begin, end - begin);
}

namespace {

// Whether a message object starts after the `,` at `comma`: cutting through the comma must
// leave a messages array that is valid exactly when the body is (`[1,]` is not, `[]` is).
bool ObjectFollows(std::string_view body, size_t comma) {
  for (size_t i = comma + 1; i < body.size(); ++i) {
    const char c = body[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == '{';
  }
  return false;
}

}  // namespace

namespace {

// The last resumable message of `prefix` that `body` repeats byte for byte, with a message
// after it.
template <typename SegmentHashFn>
int Matched(const ReusablePrefix& prefix, std::string_view body, SegmentHashFn&& hash) {
  int matched = -1;
  size_t begin = 0;
  for (size_t i = 0; i < prefix.separators.size(); ++i) {
    const size_t end = prefix.separators[i];
    // The separator itself must be in the body too, and another message must follow it.
    if (end >= body.size() || hash(begin, end) != prefix.segment_hashes[i]) break;
    if (body[end] == ',' && (prefix.states[i] & ReusablePrefix::kResumable) &&
        ObjectFollows(body, end)) {
      matched = static_cast<int>(i);
    }
    begin = end;
  }
  return matched;
}

}  // namespace

PrefixMatch PrefixReuseCache::Find(std::string_view body, uint8_t api) {
  PrefixMatch best;
  if (body.size() < kMinBodyBytes) return best;
  std::vector<Entry> candidates;
  {
    common::MutexLock lock(&mu_);
    auto it = by_key_.find(KeyOf(body, api));
    if (it == by_key_.end()) return best;
    for (auto pos : it->second) {
      candidates.push_back(*pos);
      lru_.splice(lru_.begin(), lru_, pos);  // iterators stay valid
    }
  }
  // The candidates of one key mostly share their first messages (an agent's tools and system
  // prompt): each distinct segment of the body is hashed once for all of them. One candidate
  // (a session's own previous turn, the usual case) hashes each segment once anyway: there the
  // table's inserts were 8% of a 400 KB turn's user time (docs/benchmarks.md).
  const auto direct = [&](size_t begin, size_t end) { return SegmentHash(body, begin, end); };
  std::unordered_map<uint64_t, uint64_t> hashed;
  const auto shared = [&](size_t begin, size_t end) {
    auto [it, inserted] = hashed.try_emplace(uint64_t{begin} << 32 | end, 0);
    if (inserted) it->second = SegmentHash(body, begin, end);
    return it->second;
  };
  for (const Entry& c : candidates) {
    const int j = candidates.size() == 1 ? Matched(*c, body, direct) : Matched(*c, body, shared);
    if (j >= 0 && (best.messages < 0 || c->separators[j] > best.cut_end - 1)) {
      best.prefix = c;
      best.messages = j;
      best.cut_begin = c->messages_begin;
      best.cut_end = c->separators[j] + 1;  // through the `,` after message j
    }
  }
  return best;
}

void PrefixReuseCache::Publish(std::shared_ptr<const ReusablePrefix> entry) {
  common::MutexLock lock(&mu_);
  auto& same_key = by_key_[entry->key];
  for (auto it = same_key.begin(); it != same_key.end();) {
    if (SameConversation(***it, *entry)) {
      bytes_ -= (**it)->bytes();
      lru_.erase(*it);
      it = same_key.erase(it);
    } else {
      ++it;
    }
  }
  if (same_key.size() >= kPerKey) {  // the oldest published under this key gives way
    bytes_ -= (*same_key.front())->bytes();
    lru_.erase(same_key.front());
    same_key.erase(same_key.begin());
  }
  bytes_ += entry->bytes();
  lru_.push_front(std::move(entry));
  same_key.push_back(lru_.begin());
  EvictLocked();
}

void PrefixReuseCache::EvictLocked() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    const Entry& victim = lru_.back();
    auto key_it = by_key_.find(victim->key);
    auto& list = key_it->second;
    list.erase(std::find(list.begin(), list.end(), std::prev(lru_.end())));
    if (list.empty()) by_key_.erase(key_it);
    bytes_ -= victim->bytes();
    lru_.pop_back();
  }
}

PrefixReuseCache::Stats PrefixReuseCache::stats() const {
  common::MutexLock lock(&mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  s.bytes = bytes_;
  return s;
}

void PrefixReuseCache::CountMiss() {
  common::MutexLock lock(&mu_);
  ++stats_.misses;
}

void PrefixReuseCache::CountLateTools() {
  common::MutexLock lock(&mu_);
  ++stats_.late_tools;
}

void PrefixReuseCache::CountHit(size_t reused_bytes) {
  common::MutexLock lock(&mu_);
  ++stats_.hits;
  stats_.reused_bytes += reused_bytes;
}

}  // namespace kvgate::kvindex
