#include "router/precise/speculative_blocks.h"

#include <algorithm>

#include "kvindex/group_imitation.h"

namespace kvgate::router {

void SpeculativeBlocks::Insert(kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
                               Clock::time_point expires, absl::Span<const uint32_t> groups) {
  common::MutexLock lock(&mu_);
  const auto now = Clock::now();
  if (expiry_.size() + chain.size() > sweep_at_) {
    absl::erase_if(expiry_, [&](const auto& e) { return e.second.expires <= now; });
    if (expiry_.size() + chain.size() > kMaxEntries) expiry_.clear();  // Guesses; events re-teach.
    // The next sweep when the live guesses have doubled: the table keeps the size the TTL's
    // worth of guesses needs instead of growing (and rehashing) up to the bound and starting over.
    sweep_at_ = std::max(kMinSweepAt, 2 * (expiry_.size() + chain.size()));
  }
  for (size_t i = 0; i < chain.size(); ++i) {
    Guess& g = expiry_[Key{holder.Key(), chain[i]}];
    if (g.expires <= now) g.groups = 0;  // An expired guess's groups say nothing any more.
    g.expires = std::max(g.expires, expires);
    if (i < groups.size()) g.groups |= groups[i];
  }
}

bool SpeculativeBlocks::InGroup(kvindex::Holder holder, kvindex::BlockHash hash, uint32_t group,
                                Clock::time_point now) const {
  if (group >= kMaxGuessedGroups) return false;
  common::MutexLock lock(&mu_);
  auto it = expiry_.find(Key{holder.Key(), hash});
  return it != expiry_.end() && it->second.expires > now && (it->second.groups >> group & 1) != 0;
}

uint32_t SpeculativeBlocks::Extend(kvindex::Holder holder,
                                   absl::Span<const kvindex::BlockHash> chain, uint32_t confirmed,
                                   Clock::time_point now) const {
  common::MutexLock lock(&mu_);
  uint32_t n = confirmed;
  while (n < chain.size()) {
    auto it = expiry_.find(Key{holder.Key(), chain[n]});
    if (it == expiry_.end() || it->second.expires <= now) break;
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

std::vector<uint32_t> PendingGroups(const kvindex::HybridGroups& groups, kvindex::Holder holder,
                                    uint32_t n, uint32_t block_size, uint32_t hit, uint32_t start,
                                    uint32_t mamba_chunk_blocks) {
  std::vector<uint32_t> masks;
  for (const kvindex::GroupView& view : groups.Groups(holder)) {
    if (view.group >= kMaxGuessedGroups || view.block_size != block_size) continue;
    if (masks.empty()) masks.assign(n, 0);
    kvindex::ImitatedGroupSpec spec;
    spec.spec = view.spec;
    if (view.spec.kind == kvindex::GroupKind::kMamba) spec.chunk_blocks = mamba_chunk_blocks;
    const uint32_t bit = uint32_t{1} << view.group;
    kvindex::ForEachKeptBlock(spec, block_size, n, hit, start,
                              [&](uint32_t i) { masks[i] |= bit; });
  }
  return masks;
}

uint32_t GuessedHybridHit(const kvindex::HybridGroups& groups, const SpeculativeBlocks& guesses,
                          kvindex::Holder holder, absl::Span<const kvindex::BlockHash> chain,
                          uint32_t block_size, uint32_t confirmed, uint32_t guessed,
                          SpeculativeBlocks::Clock::time_point now, uint64_t ahead_tokens) {
  // Where full attention's events hold a block, the other groups' events say what the engine
  // kept of it; past them, only a guess can.
  return groups.Cap(
      holder, chain, block_size, guessed, /*gpu_only=*/true,
      [&](uint32_t group, uint32_t block) {
        return block >= confirmed && guesses.InGroup(holder, chain[block], group, now);
      },
      ahead_tokens);
}

}  // namespace kvgate::router
