#include "kvindex/group_imitation.h"

#include <algorithm>

namespace kvgate::kvindex {

namespace {

bool SameSpec(const ImitatedGroupSpec& a, const ImitatedGroupSpec& b) {
  return a.spec.kind == b.spec.kind && a.spec.sliding_window == b.spec.sliding_window &&
         a.capacity_blocks == b.capacity_blocks && a.chunk_blocks == b.chunk_blocks;
}

}  // namespace

void GroupImitation::Configure(Holder holder, absl::Span<const ImitatedGroupSpec> groups) {
  common::MutexLock lock(&mu_);
  if (groups.empty()) {
    holders_.erase(holder);
    return;
  }
  auto& current = holders_[holder];
  if (current.size() == groups.size() &&
      std::equal(current.begin(), current.end(), groups.begin(),
                 [](const Group& g, const ImitatedGroupSpec& s) { return SameSpec(g.spec, s); })) {
    return;  // A reload with the same layout keeps what was learned.
  }
  current.clear();
  current.resize(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    current[i].spec = groups[i];
    current[i].spec.capacity_blocks =
        std::clamp<uint64_t>(groups[i].capacity_blocks, 1, kMaxBlocksPerGroup);
  }
}

void GroupImitation::Forget(Holder holder) {
  common::MutexLock lock(&mu_);
  holders_.erase(holder);
}

bool GroupImitation::Hybrid(Holder holder) const {
  common::MutexLock lock(&mu_);
  return holders_.contains(holder);
}

uint32_t GroupImitation::Cap(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
                             uint32_t full_blocks) const {
  uint32_t hit = std::min<uint32_t>(full_blocks, static_cast<uint32_t>(chain.size()));
  common::MutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return hit;
  const std::vector<Group>& groups = h->second;
  return CoordinatedHit(hit, groups.size(), [&](size_t i, uint32_t at) {
    const Group& g = groups[i];
    return GroupHit(g.spec.spec, block_size, at,
                    [&](uint32_t b) { return g.where.contains(chain[b]); });
  });
}

void GroupImitation::Touch(Group& g, BlockHash hash) {
  if (auto it = g.where.find(hash); it != g.where.end()) {
    g.lru.splice(g.lru.end(), g.lru, it->second);  // Most recently used.
    return;
  }
  if (g.where.size() >= g.spec.capacity_blocks) {
    g.where.erase(g.lru.front());
    g.lru.pop_front();
  }
  g.where.emplace(hash, g.lru.insert(g.lru.end(), hash));
}

void ForEachKeptBlock(const ImitatedGroupSpec& spec, uint32_t block_size, uint32_t n, uint32_t hit,
                      uint32_t start, absl::FunctionRef<void(uint32_t)> keep) {
  hit = std::min(hit, n);
  start = std::clamp(start, hit, n);  // Where computing begins.
  if (n == 0) return;
  switch (spec.spec.kind) {
    case GroupKind::kSlidingWindow: {
      // The window before the computed part is read (hit) or loaded; every new block is
      // computed, then freed as the context moves past it (oldest first). Blocks before the
      // window are not touched, loaded ones included.
      const uint32_t window = WindowBlocks(spec.spec.sliding_window, block_size);
      for (uint32_t i = start > window ? start - window : 0; i < n; ++i) keep(i);
      break;
    }
    case GroupKind::kMamba:
      // The state it started from (a checkpoint only when nothing was loaded past the hit), the
      // checkpoints at its prefill chunks' ends, then the one at its last full block.
      if (hit > 0 && start == hit) keep(hit - 1);
      if (spec.chunk_blocks > 0) {
        for (uint64_t end = uint64_t{start} + spec.chunk_blocks; end < n;
             end += spec.chunk_blocks) {
          keep(static_cast<uint32_t>(end - 1));
        }
      }
      keep(n - 1);
      break;
    case GroupKind::kFullAttention:
      for (uint32_t i = 0; i < n; ++i) keep(i);
      break;
  }
}

void GroupImitation::Learn(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
                           uint32_t hit_blocks, uint32_t start_blocks) {
  const uint32_t n = static_cast<uint32_t>(chain.size());
  common::MutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end() || n == 0) return;
  for (Group& g : h->second) {
    ForEachKeptBlock(g.spec, block_size, n, hit_blocks, start_blocks,
                     [&](uint32_t i) { Touch(g, chain[i]); });
  }
}

void GroupImitation::LearnOutput(Holder holder, uint64_t prompt_tokens, uint64_t output_tokens,
                                 uint32_t block_size) {
  if (output_tokens == 0 || block_size == 0) return;
  // The last token sampled is never computed: the decode's KV covers [prompt, prompt+output-1).
  const uint64_t crossed =
      (prompt_tokens + output_tokens - 1) / block_size - prompt_tokens / block_size;
  common::MutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  for (Group& g : h->second) {
    const uint64_t n = std::min(crossed, g.spec.capacity_blocks);
    // Named by a counter: no later prompt's chain names the decode's blocks (chain hashes are
    // uniform 64-bit values, so one equal to a count is a 2^-64 chance).
    for (uint64_t i = 0; i < n; ++i) Touch(g, ++output_blocks_);
  }
}

void GroupImitation::Unlearn(Holder holder, absl::Span<const BlockHash> blocks) {
  common::MutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  for (Group& g : h->second) {
    for (BlockHash hash : blocks) {
      if (auto it = g.where.find(hash); it != g.where.end()) {
        g.lru.erase(it->second);
        g.where.erase(it);
      }
    }
  }
}

std::vector<ImitatedGroupView> GroupImitation::Groups(Holder holder) const {
  std::vector<ImitatedGroupView> out;
  common::MutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return out;
  for (const Group& g : h->second) {
    out.push_back({g.spec.spec, g.spec.capacity_blocks, static_cast<uint64_t>(g.where.size())});
  }
  return out;
}

}  // namespace kvgate::kvindex
