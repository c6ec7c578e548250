#include "router/precise/speculative_blocks.h"

#include <algorithm>

namespace kvgate::router {

void SpeculativeBlocks::Insert(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
                               Clock::time_point expires) {
  common::MutexLock lock(&mu_);
  if (expiry_.size() + chain.size() > kSweepAt) {
    const auto now = Clock::now();
    absl::erase_if(expiry_, [&](const auto& e) { return e.second <= now; });
    if (expiry_.size() + chain.size() > kSweepAt) expiry_.clear();  // Guesses; events re-teach.
  }
  for (kvindex::BlockHash h : chain) {
    auto& t = expiry_[Key{holder.Key(), h}];
    t = std::max(t, expires);
  }
}

uint32_t SpeculativeBlocks::Extend(kvindex::Holder holder,
                                   absl::Span<const kvindex::BlockHash> chain, uint32_t confirmed,
                                   Clock::time_point now) const {
  common::MutexLock lock(&mu_);
  uint32_t n = confirmed;
  while (n < chain.size()) {
    auto it = expiry_.find(Key{holder.Key(), chain[n]});
    if (it == expiry_.end() || it->second <= now) break;
    ++n;
  }
  return n;
}

void SpeculativeBlocks::Remove(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain) {
  common::MutexLock lock(&mu_);
  for (kvindex::BlockHash h : chain) expiry_.erase(Key{holder.Key(), h});
}

void SpeculativeBlocks::Forget(kvindex::Holder holder) {
  common::MutexLock lock(&mu_);
  absl::erase_if(expiry_, [&](const auto& e) { return e.first.holder == holder.Key(); });
}

size_t SpeculativeBlocks::size() const {
  common::MutexLock lock(&mu_);
  return expiry_.size();
}

}  // namespace kvgate::router
