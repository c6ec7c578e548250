#include "router/fleet/inflight_kv.h"

#include <algorithm>

namespace kvgate::router {

InFlightKv::Held InFlightKv::Add(absl::Span<const kvindex::BlockHash> chain, int64_t blocks) {
  Held held;
  const size_t n =
      std::min<size_t>(chain.size(), static_cast<size_t>(std::max<int64_t>(0, blocks)));
  held.unchained = std::max<int64_t>(0, blocks - static_cast<int64_t>(n));
  unchained_blocks_ += held.unchained;
  if (n == 0) return held;
  held.keys.reserve(n / kGroup + 1);
  auto add = [&](size_t position, uint32_t weight) {
    const kvindex::BlockHash h = chain[position];
    Key& k = keys_[h];
    if (k.refs++ == 0) {
      k.weight = weight;
      keyed_blocks_ += weight;
    }
    held.keys.push_back(h);
  };
  size_t end = kGroup;  // one past the group's last block
  for (; end <= n; end += kGroup) add(end - 1, kGroup);
  const size_t tail = n % kGroup;
  if (tail != 0) add(n - 1, static_cast<uint32_t>(tail));
  return held;
}

void InFlightKv::Remove(const Held& held) {
  unchained_blocks_ -= held.unchained;
  for (const kvindex::BlockHash h : held.keys) {
    auto it = keys_.find(h);
    if (it == keys_.end()) continue;  // not added here: nothing to take back
    if (--it->second.refs == 0) {
      keyed_blocks_ -= it->second.weight;
      keys_.erase(it);
    }
  }
}

}  // namespace kvgate::router
