#include "tokenizer/incremental.h"

#include <xxhash.h>

#include "common/mutex.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/hf_tokenizer.h"

namespace kvgate::tokenizer {

IncrementalCache::IncrementalCache(Options options) : options_(options) {}
IncrementalCache::~IncrementalCache() = default;

IncrementalCache::Stats IncrementalCache::stats() const {
  common::MutexLock lock(&mu_);
  Stats s = stats_;
  s.held_bytes = bytes_;
  return s;
}

std::shared_ptr<const IncrementalCache::Segment> IncrementalCache::Lookup(
    const std::vector<Key>& keys, size_t* index) {
  common::MutexLock lock(&mu_);
  for (size_t i = keys.size(); i-- > 0;) {
    auto it = map_.find(keys[i]);
    if (it == map_.end()) continue;
    lru_.splice(lru_.begin(), lru_, it->second);
    *index = i;
    return it->second->ids;
  }
  return nullptr;
}

void IncrementalCache::AppendChain(const Segment& chain, size_t capacity,
                                   std::vector<uint32_t>* out) {
  const Segment* parts[kMaxDepth];
  uint32_t n = 0;
  for (const Segment* s = &chain; s != nullptr && n < kMaxDepth; s = s->prev.get()) parts[n++] = s;
  out->reserve(capacity);
  while (n-- > 0) out->insert(out->end(), parts[n]->ids.begin(), parts[n]->ids.end());
}

void IncrementalCache::Store(Key key, size_t prefix_bytes, std::shared_ptr<const Segment> reused,
                             absl::Span<const uint32_t> ids, const Key* replaces) {
  const size_t bytes = ids.size() * sizeof(uint32_t);
  if (bytes > options_.max_bytes) return;
  // Built before the lock: the new ids on the reused chain, or all of them once it is deep.
  auto segment = std::make_shared<Segment>();
  segment->total = ids.size();
  if (reused != nullptr && reused->depth < kMaxDepth) {
    segment->ids.assign(ids.begin() + reused->total, ids.end());
    segment->depth = reused->depth + 1;
    segment->prev = std::move(reused);
  } else {
    segment->ids.assign(ids.begin(), ids.end());
  }
  common::MutexLock lock(&mu_);
  // The session moved past the prefix it reused: that entry is now a prefix of this one.
  if (replaces != nullptr && !(*replaces == key)) {
    if (auto it = map_.find(*replaces); it != map_.end()) {
      bytes_ -= it->second->ids->total * sizeof(uint32_t);
      lru_.erase(it->second);
      map_.erase(it);
    }
  }
  if (auto it = map_.find(key); it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(Entry{key, prefix_bytes, std::move(segment)});
  map_.emplace(key, lru_.begin());
  bytes_ += bytes;
  while (bytes_ > options_.max_bytes && !lru_.empty()) {
    bytes_ -= lru_.back().ids->total * sizeof(uint32_t);
    map_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

absl::Status IncrementalCache::Encode(const HfTokenizer& tokenizer, std::string_view text,
                                      std::vector<uint32_t>* out) {
  out->clear();
  auto invalid = [] { return absl::InvalidArgumentError("render is not valid UTF-8"); };
  thread_local std::vector<size_t> cuts;
  tokenizer.CutPoints(text, &cuts);
  while (!cuts.empty() && cuts.front() < options_.min_prefix_bytes) cuts.erase(cuts.begin());
  if (cuts.empty()) {
    if (!hf::IsValidUtf8(text)) return invalid();
    return tokenizer.EncodeRange(text, 0, text.size(), out);
  }

  // One streaming pass: the hash of text[0, cut) at every cut.
  std::vector<Key> keys;
  keys.reserve(cuts.size());
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  size_t hashed = 0;
  for (size_t cut : cuts) {
    XXH3_128bits_update(state, text.data() + hashed, cut - hashed);
    hashed = cut;
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    keys.push_back(Key{h.low64, h.high64});
  }
  XXH3_freeState(state);

  size_t from = 0;
  size_t hit = 0;
  std::shared_ptr<const Segment> reused = Lookup(keys, &hit);
  const bool found = reused != nullptr;
  if (found) from = cuts[hit];
  // A cached prefix was valid when it was stored (its bytes hash equal); a cut starts a token,
  // so the rest is checked from a character boundary.
  if (!hf::IsValidUtf8(text.substr(from))) return invalid();
  // Room for the rest too (a token is seldom under two bytes), so that appending it does not
  // move the reused ids again.
  const size_t room = (text.size() - from) / 2 + 16;
  if (found) {
    AppendChain(*reused, reused->total + room, out);
  } else {
    out->reserve(room);
  }
  // Tokenise up to the last cut (stored for the next turn), then the tail.
  const size_t last = cuts.back();
  if (last > from) {
    if (absl::Status s = tokenizer.EncodeRange(text, from, last, out); !s.ok()) return s;
  }
  const size_t prefix_ids = out->size();
  if (absl::Status s = tokenizer.EncodeRange(text, last, text.size(), out); !s.ok()) return s;
  // The same render again (its last cut is the entry found) has nothing to add.
  if (!found || hit + 1 < keys.size()) {
    Store(keys.back(), last, std::move(reused), absl::MakeConstSpan(out->data(), prefix_ids),
          found ? &keys[hit] : nullptr);
  }
  common::MutexLock lock(&mu_);
  ++(found ? stats_.hits : stats_.misses);
  stats_.reused_bytes += from;
  stats_.encoded_bytes += text.size() - from;
  return absl::OkStatus();
}

}  // namespace kvgate::tokenizer
