#include "kvindex/hybrid_groups.h"

#include <algorithm>
#include <bit>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"

namespace kvgate::kvindex {

std::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kFullAttention:
      return "full_attention";
    case GroupKind::kSlidingWindow:
      return "sliding_window";
    case GroupKind::kMamba:
      return "mamba";
  }
  return "unknown";
}

bool ParseGroupKind(std::string_view name, GroupKind* kind) {
  const std::string n = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  // vLLM's spec kinds (kv_cache_interface.py class names in snake case) and SGLang's names.
  static constexpr std::pair<std::string_view, GroupKind> kNames[] = {
      {"full_attention", GroupKind::kFullAttention},
      {"full", GroupKind::kFullAttention},
      {"mla_attention", GroupKind::kFullAttention},
      {"sink_full_attention", GroupKind::kFullAttention},
      {"sliding_window", GroupKind::kSlidingWindow},
      {"sliding_window_attention", GroupKind::kSlidingWindow},
      {"swa", GroupKind::kSlidingWindow},
      {"chunked_local_attention", GroupKind::kSlidingWindow},
      {"mamba", GroupKind::kMamba},
      {"linear_attention", GroupKind::kMamba},
      {"gdn", GroupKind::kMamba},
  };
  for (const auto& [known, k] : kNames) {
    if (n == known) {
      *kind = k;
      return true;
    }
  }
  return false;
}

uint32_t WindowBlocks(uint32_t sliding_window, uint32_t block_size) {
  const uint32_t bs = std::max<uint32_t>(1, block_size);
  return sliding_window > 1 ? (sliding_window - 1 + bs - 1) / bs : 0;
}

uint32_t GroupHit(const GroupSpec& spec, uint32_t block_size, uint32_t full_blocks,
                  const std::function<bool(uint32_t)>& cached) {
  switch (spec.kind) {
    case GroupKind::kFullAttention: {
      uint32_t n = 0;
      while (n < full_blocks && cached(n)) ++n;
      return n;
    }
    case GroupKind::kSlidingWindow: {
      // The token at the hit attends to the W-1 tokens before it: those blocks must be there.
      // The hit is the top of the highest run of `need` cached blocks, else the run from block
      // 0. Every such run holds one of the blocks probed `need` apart from the top, so a long
      // prefix whose window blocks are gone costs a lookup per window, not one per block.
      const uint32_t need = std::max<uint32_t>(1, WindowBlocks(spec.sliding_window, block_size));
      int64_t probe = int64_t{full_blocks} - 1;
      while (probe >= 0) {
        const auto p = static_cast<uint32_t>(probe);
        if (!cached(p)) {
          probe -= need;
          continue;
        }
        uint32_t top = p + 1;  // Stops within `need`: the probe above was a miss, or the end.
        while (top < full_blocks && cached(top)) ++top;
        uint32_t bottom = p;
        while (bottom > 0 && top - bottom < need && cached(bottom - 1)) --bottom;
        if (top - bottom >= need || bottom == 0) return top;
        probe = int64_t{bottom} - 2;  // Block bottom - 1 is a miss: probe on from below it.
      }
      // No run as long as the window: the run that reaches block 0 (no probe fell in it), shorter
      // than the window, is still a hit.
      uint32_t run = 0;
      while (run < full_blocks && run < need && cached(run)) ++run;
      return run;
    }
    case GroupKind::kMamba:
      for (uint32_t i = full_blocks; i-- > 0;) {
        if (cached(i)) return i + 1;
      }
      return 0;
  }
  return 0;
}

uint32_t CoordinatedHit(uint32_t hit, size_t num_groups,
                        const std::function<uint32_t(size_t, uint32_t)>& group_hit) {
  for (bool lowered = true; lowered && hit > 0;) {
    lowered = false;
    for (size_t g = 0; g < num_groups && hit > 0; ++g) {
      const uint32_t h = group_hit(g, hit);
      if (h < hit) {
        hit = h;
        lowered = true;
      }
    }
  }
  return hit;
}

void HybridGroups::Store(Holder holder, uint32_t group, const GroupSpec& spec, uint32_t block_size,
                         absl::Span<const BlockHash> blocks, Tier tier) {
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  common::WriterMutexLock lock(&mu_);
  Group& g = holders_[holder][group];
  g.spec = spec;
  g.block_size = block_size;
  const bool gpu = tier == Tier::kGpu;
  for (BlockHash h : blocks) {
    Block& b = g.blocks[h];
    if (gpu) b.stamp = ++g.clock;  // Just computed: the pool's most recently used.
    if ((b.tiers & bit) == 0) {
      b.tiers |= bit;
      ++g.counts[static_cast<int>(tier)];
    }
  }
  if (gpu) g.most_gpu = std::max(g.most_gpu, g.counts[static_cast<int>(Tier::kGpu)]);
}

void HybridGroups::Remove(Holder holder, uint32_t group, absl::Span<const BlockHash> blocks,
                          Tier tier) {
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  common::WriterMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  auto g = h->second.find(group);
  if (g == h->second.end()) return;
  for (BlockHash hash : blocks) {
    auto it = g->second.blocks.find(hash);
    if (it == g->second.blocks.end() || (it->second.tiers & bit) == 0) continue;
    it->second.tiers &= static_cast<uint8_t>(~bit);
    --g->second.counts[static_cast<int>(tier)];
    if (tier == Tier::kGpu) g->second.evicted = true;
    if (it->second.tiers == 0) g->second.blocks.erase(it);
  }
}

void HybridGroups::Clear(Holder holder, Tier tier, bool all) {
  const uint8_t bit = all ? uint8_t{0xff} : uint8_t{1} << static_cast<int>(tier);
  common::WriterMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  for (auto& [index, g] : h->second) {
    if (all) {
      g.blocks.clear();
      g.counts = {};
      continue;
    }
    absl::erase_if(g.blocks, [bit](auto& entry) {
      entry.second.tiers &= static_cast<uint8_t>(~bit);
      return entry.second.tiers == 0;
    });
    g.counts[static_cast<int>(tier)] = 0;
  }
}

void HybridGroups::Forget(Holder holder) {
  common::WriterMutexLock lock(&mu_);
  holders_.erase(holder);
}

bool HybridGroups::Hybrid(Holder holder) const {
  common::ReaderMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  return h != holders_.end() && !h->second.empty();
}

bool HybridGroups::SurvivesAhead(const Group& g, const Block& b, uint64_t churn) {
  if (churn == 0 || !g.evicted) return true;
  const uint64_t held = g.counts[static_cast<int>(Tier::kGpu)];
  if (held == 0) return false;
  const uint64_t newer = std::min(held - 1, g.clock - b.stamp);  // A stamp is a past clock.
  const uint64_t free = std::max(g.most_gpu, held) - held;
  return churn <= free + (held - 1 - newer);
}

uint32_t HybridGroups::Cap(Holder holder, absl::Span<const BlockHash> chain, uint32_t block_size,
                           uint32_t full_blocks, bool gpu_only,
                           const std::function<bool(uint32_t, uint32_t)>& pending,
                           uint64_t ahead_tokens) const {
  common::ReaderMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  uint32_t hit = std::min<uint32_t>(full_blocks, static_cast<uint32_t>(chain.size()));
  if (h == holders_.end() || h->second.empty()) return hit;
  const uint8_t mask = gpu_only ? uint8_t{1} << static_cast<int>(Tier::kGpu) : uint8_t{0xff};
  // The coordinator's fixed point over this holder's groups kept in the chain's block size.
  absl::InlinedVector<std::pair<uint32_t, const Group*>, 4> groups;
  for (const auto& entry : h->second) {
    if (entry.second.block_size == block_size) groups.emplace_back(entry.first, &entry.second);
  }
  hit = CoordinatedHit(hit, groups.size(), [&](size_t i, uint32_t at) {
    const uint32_t index = groups[i].first;
    const Group* g = groups[i].second;
    // Only a window's pool turns over with the prefill ahead: a Mamba group checkpoints a few
    // states a prompt, its churn is the decodes' (not known here).
    const uint64_t churn = gpu_only && g->spec.kind == GroupKind::kSlidingWindow
                               ? ahead_tokens / std::max<uint32_t>(1, block_size)
                               : 0;
    return GroupHit(g->spec, block_size, at, [&](uint32_t b) {
      auto it = g->blocks.find(chain[b]);
      if (it != g->blocks.end() && (it->second.tiers & mask) != 0 &&
          SurvivesAhead(*g, it->second, churn)) {
        return true;
      }
      return pending != nullptr && pending(index, b);
    });
  });
  return hit;
}

void HybridGroups::Touch(Holder holder, absl::Span<const BlockHash> blocks,
                         absl::Span<const uint32_t> groups) {
  const size_t n = std::min(blocks.size(), groups.size());
  if (n == 0) return;
  constexpr uint8_t kGpuBit = uint8_t{1} << static_cast<int>(Tier::kGpu);
  common::WriterMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return;
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t bits = groups[i]; bits != 0; bits &= bits - 1) {
      auto g = h->second.find(static_cast<uint32_t>(std::countr_zero(bits)));
      if (g == h->second.end()) continue;
      auto it = g->second.blocks.find(blocks[i]);
      if (it != g->second.blocks.end() && (it->second.tiers & kGpuBit) != 0) {
        it->second.stamp = ++g->second.clock;
      }
    }
  }
}

std::vector<GroupView> HybridGroups::Groups(Holder holder) const {
  std::vector<GroupView> out;
  common::ReaderMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return out;
  for (const auto& [index, g] : h->second) {
    out.push_back({index, g.spec, g.block_size, g.counts});
  }
  std::sort(out.begin(), out.end(),
            [](const GroupView& a, const GroupView& b) { return a.group < b.group; });
  return out;
}

std::vector<std::pair<GroupView, uint32_t>> HybridGroups::Explain(Holder holder,
                                                                  absl::Span<const BlockHash> chain,
                                                                  uint32_t block_size,
                                                                  uint32_t full_blocks) const {
  std::vector<std::pair<GroupView, uint32_t>> out;
  full_blocks = std::min<uint32_t>(full_blocks, static_cast<uint32_t>(chain.size()));
  common::ReaderMutexLock lock(&mu_);
  auto h = holders_.find(holder);
  if (h == holders_.end()) return out;
  for (const auto& [index, entry] : h->second) {
    const auto& g = entry;  // named, not a binding: the lambda below captures it (clang)
    const uint32_t hit = g.block_size != block_size
                             ? full_blocks
                             : GroupHit(g.spec, block_size, full_blocks,
                                        [&](uint32_t i) { return g.blocks.contains(chain[i]); });
    out.push_back({{index, g.spec, g.block_size, g.counts}, hit});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first.group < b.first.group; });
  return out;
}

}  // namespace kvgate::kvindex
