#include "sim/kv_coordinator.h"

#include <algorithm>
#include <optional>
#include <string>

#include "sim/kv_groups.h"

namespace kvgate::sim {

KvCoordinator::KvCoordinator(const Profile& profile, std::vector<KvEvent>* events)
    : block_size_(profile.block_size), specs_(profile.KvGroups()) {
  for (size_t g = 0; g < specs_.size(); ++g) {
    const KvGroupSpec& spec = specs_[g];
    // A profile without groups keeps today's events: no group fields.
    std::optional<GroupTag> tag;
    if (!profile.groups.empty()) {
      tag = GroupTag{static_cast<int64_t>(g), std::string(KvGroupKindName(spec.kind)),
                     spec.kind == KvGroupKind::kSlidingWindow
                         ? std::optional<int64_t>(spec.sliding_window)
                         : std::nullopt};
    }
    // The host tier (CPU offload) backs full attention only.
    pools_.push_back(std::make_unique<BlockPool>(spec.num_gpu_blocks,
                                                 g == 0 ? profile.num_cpu_blocks : 0, block_size_,
                                                 events, std::move(tag)));
    mamba_ = mamba_ || spec.kind == KvGroupKind::kMamba;
  }
}

double KvCoordinator::Usage() const {
  if (pools_.size() == 1) return pools_[0]->Usage();
  uint64_t total = 0, used = 0;
  for (const auto& p : pools_) {
    total += p->num_gpu_blocks();
    used += p->num_gpu_blocks() - p->NumFreeBlocks();
  }
  return total == 0 ? 0.0 : static_cast<double>(used) / static_cast<double>(total);
}

CacheHit KvCoordinator::FindHit(absl::Span<const uint64_t> hashes) const {
  const BlockPool& full = *pools_[0];
  const size_t gpu = full.GpuPrefix(hashes);
  const size_t host = full.num_cpu_blocks() > 0 ? full.HostPrefix(hashes, gpu) : 0;
  const size_t hit = HybridCacheHit(specs_, block_size_, gpu + host, [&](size_t i) {
    return pools_.size() > 1 && pools_[1]->IsCached(hashes[i]);
  });
  CacheHit out;
  out.gpu = std::min(gpu, hit);
  out.host = hit - out.gpu;
  out.blocks = hit;
  return out;
}

KvCoordinator::Need KvCoordinator::AdmitNeed(size_t group, const CacheHit& hit, uint32_t computed,
                                             uint32_t n) const {
  const KvGroupSpec& spec = specs_[group];
  const uint32_t end = BlocksFor(computed + n);
  Need need;
  switch (spec.kind) {
    case KvGroupKind::kFullAttention:
      need.acquire_to = hit.gpu;
      need.new_blocks = end - static_cast<uint32_t>(hit.gpu);
      break;
    case KvGroupKind::kSlidingWindow: {
      // The window's blocks before the hit, then fresh ones; positions the window already moved
      // past (store or P/D tokens beyond the hit) stay null.
      const size_t skipped = SlidingWindowSkippedBlocks(computed, spec.sliding_window, block_size_);
      need.acquire_from =
          std::max(hit.blocks - HitBlocksKept(spec, block_size_, hit.blocks), skipped);
      need.acquire_to = std::max(need.acquire_from, hit.blocks);
      const size_t first_new = std::max(hit.blocks, skipped);
      need.new_blocks = end > first_new ? end - static_cast<uint32_t>(first_new) : 0;
      break;
    }
    case KvGroupKind::kMamba:
      // The checkpoint at hit-1 is the request's state only when it starts there.
      if (hit.blocks > 0 && computed == hit.blocks * block_size_) {
        need.acquire_from = hit.blocks - 1;
        need.acquire_to = hit.blocks;
      }
      need.new_blocks = 1 + (Checkpoints(computed, n) ? 1 : 0);  // State (+ checkpoint).
      break;
  }
  return need;
}

bool KvCoordinator::CanAdmit(const CacheHit& hit, absl::Span<const uint64_t> hashes,
                             uint32_t computed, uint32_t n) const {
  for (size_t g = 0; g < pools_.size(); ++g) {
    const Need need = AdmitNeed(g, hit, computed, n);
    const BlockPool& pool = *pools_[g];
    const uint32_t taken =
        pool.NumFreeAmong(hashes.subspan(need.acquire_from, need.acquire_to - need.acquire_from));
    if (pool.NumFreeBlocks() - taken < need.new_blocks) return false;
  }
  return true;
}

int32_t KvCoordinator::AllocateOne(size_t group) {
  std::vector<int32_t> one;
  pools_[group]->Allocate(1, &one);
  return one.front();
}

void KvCoordinator::Admit(RequestKv* kv, const CacheHit& hit, absl::Span<const uint64_t> hashes,
                          uint32_t computed, uint32_t n) {
  kv->groups.assign(pools_.size(), GroupBlocks{});
  const uint32_t end = BlocksFor(computed + n);
  for (size_t g = 0; g < pools_.size(); ++g) {
    const Need need = AdmitNeed(g, hit, computed, n);
    BlockPool& pool = *pools_[g];
    GroupBlocks& b = kv->groups[g];
    const auto acquired = hashes.subspan(need.acquire_from, need.acquire_to - need.acquire_from);
    switch (specs_[g].kind) {
      case KvGroupKind::kFullAttention:
        pool.AcquireCached(acquired, &b.ids);
        if (hit.host > 0) {
          pool.LoadFromHost(
              hashes.subspan(hit.gpu, hit.host),
              hit.gpu > 0 ? std::optional<uint64_t>(hashes[hit.gpu - 1]) : std::nullopt, &b.ids);
        }
        pool.Allocate(need.new_blocks - static_cast<uint32_t>(hit.host), &b.ids);
        b.num_cached = static_cast<uint32_t>(hit.blocks);
        break;
      case KvGroupKind::kSlidingWindow:
        b.ids.assign(need.acquire_from, -1);
        pool.AcquireCached(acquired, &b.ids);
        b.ids.resize(end - need.new_blocks, -1);
        pool.Allocate(need.new_blocks, &b.ids);
        b.num_cached = static_cast<uint32_t>(hit.blocks);
        break;
      case KvGroupKind::kMamba: {
        std::vector<int32_t> ckpt;
        pool.AcquireCached(acquired, &ckpt);
        if (!ckpt.empty()) b.checkpoint = ckpt.front();
        b.state = AllocateOne(g);
        if (Checkpoints(computed, n)) b.pending = AllocateOne(g);
        break;
      }
    }
  }
}

void KvCoordinator::RemoveSkipped(RequestKv* kv, uint32_t computed) {
  for (size_t g = 0; g < pools_.size() && g < kv->groups.size(); ++g) {
    if (specs_[g].kind != KvGroupKind::kSlidingWindow) continue;
    std::vector<int32_t>& ids = kv->groups[g].ids;
    const size_t skipped = std::min<size_t>(
        ids.size(), SlidingWindowSkippedBlocks(computed, specs_[g].sliding_window, block_size_));
    // As vLLM: from the last skipped block down to the first null one; freed in that order, so
    // the highest position is evicted first.
    size_t lo = skipped;
    while (lo > 0 && ids[lo - 1] >= 0) --lo;
    if (lo == skipped) continue;
    pools_[g]->Free(absl::MakeConstSpan(ids).subspan(lo, skipped - lo));
    std::fill(ids.begin() + static_cast<ptrdiff_t>(lo),
              ids.begin() + static_cast<ptrdiff_t>(skipped), -1);
  }
}

uint32_t KvCoordinator::GrowNeed(size_t group, const GroupBlocks& g, uint32_t computed,
                                 uint32_t n) const {
  const KvGroupSpec& spec = specs_[group];
  const uint32_t end = BlocksFor(computed + n);
  const auto have = static_cast<uint32_t>(g.ids.size());
  switch (spec.kind) {
    case KvGroupKind::kFullAttention:
      return end > have ? end - have : 0;
    case KvGroupKind::kSlidingWindow: {
      const uint32_t first_new =
          std::max(have, SlidingWindowSkippedBlocks(computed, spec.sliding_window, block_size_));
      return end > first_new ? end - first_new : 0;
    }
    case KvGroupKind::kMamba:
      return (g.state < 0 ? 1 : 0) + (Checkpoints(computed, n) ? 1 : 0);
  }
  return 0;
}

bool KvCoordinator::CanGrow(const RequestKv& kv, uint32_t computed, uint32_t n) const {
  for (size_t g = 0; g < pools_.size(); ++g) {
    if (pools_[g]->NumFreeBlocks() < GrowNeed(g, kv.groups[g], computed, n)) return false;
  }
  return true;
}

void KvCoordinator::Grow(RequestKv* kv, uint32_t computed, uint32_t n) {
  const uint32_t end = BlocksFor(computed + n);
  for (size_t g = 0; g < pools_.size(); ++g) {
    GroupBlocks& b = kv->groups[g];
    const uint32_t need = GrowNeed(g, b, computed, n);
    switch (specs_[g].kind) {
      case KvGroupKind::kFullAttention:
        pools_[g]->Allocate(need, &b.ids);
        break;
      case KvGroupKind::kSlidingWindow:
        if (need > 0) {
          b.ids.resize(end - need, -1);
          pools_[g]->Allocate(need, &b.ids);
        }
        break;
      case KvGroupKind::kMamba:
        if (b.state < 0) b.state = AllocateOne(g);
        if (Checkpoints(computed, n)) b.pending = AllocateOne(g);
        break;
    }
  }
}

void KvCoordinator::Cache(RequestKv* kv, absl::Span<const uint64_t> hashes,
                          absl::Span<const uint32_t> tokens, uint32_t computed) {
  const uint32_t full = computed / block_size_;
  for (size_t g = 0; g < pools_.size(); ++g) {
    GroupBlocks& b = kv->groups[g];
    if (specs_[g].kind != KvGroupKind::kMamba) {
      if (full > b.num_cached) {
        pools_[g]->CacheBlocks(b.ids, hashes, tokens, b.num_cached, full);
        b.num_cached = full;
      }
      continue;
    }
    if (b.pending < 0) continue;  // The chunk did not end on a block boundary.
    pools_[g]->CacheBlock(b.pending, hashes, tokens, full - 1);
    if (b.checkpoint >= 0) pools_[g]->Free({b.checkpoint});
    b.checkpoint = b.pending;
    b.pending = -1;
  }
}

void KvCoordinator::Free(RequestKv* kv) {
  for (size_t g = 0; g < kv->groups.size(); ++g) {
    GroupBlocks& b = kv->groups[g];
    pools_[g]->Free(b.ids);
    // The checkpoint last, so that it is evicted last.
    pools_[g]->Free({b.checkpoint, b.state, b.pending});
  }
  kv->groups.clear();
}

size_t KvCoordinator::NumBlocks(const RequestKv& kv) const {
  size_t n = 0;
  for (const GroupBlocks& b : kv.groups) {
    n += static_cast<size_t>(
        std::count_if(b.ids.begin(), b.ids.end(), [](int32_t id) { return id >= 0; }));
    n += (b.state >= 0 ? 1 : 0) + (b.checkpoint >= 0 ? 1 : 0) + (b.pending >= 0 ? 1 : 0);
  }
  return n;
}

void KvCoordinator::ResetPrefixCache() {
  for (size_t g = 0; g < pools_.size(); ++g) pools_[g]->ResetPrefixCache(g == 0);
}

}  // namespace kvgate::sim
