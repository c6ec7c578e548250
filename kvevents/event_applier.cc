#include "kvevents/event_applier.h"

#include "absl/strings/match.h"
#include "common/mutex.h"
#include "kvindex/block_hash.h"

namespace kvgate::kvevents {

using kvindex::BlockHash;
using kvindex::Holder;
using kvindex::Tier;

uint64_t TokenRootSeed(std::string_view model) {
  return kvindex::RootSeed(kvindex::NamespaceSeed({model, "", ""}), kvindex::PromptKind::kTokens);
}

EventApplier::EventApplier(kvindex::PrefixIndex& index, ApplierOptions options,
                           kvindex::HybridGroups* groups)
    : index_(index), options_(std::move(options)), groups_(groups) {}

bool EventApplier::TierOf(const std::optional<std::string>& medium, Tier* tier) const {
  if (!medium) {
    *tier = Tier::kGpu;  // No medium: the engine's own cache.
    return true;
  }
  // Configured names first, so an operator can move a built-in one (a "DISK" that is local and
  // fast counted as host).
  for (const auto& [name, t] : options_.media) {
    if (absl::EqualsIgnoreCase(*medium, name)) {
      *tier = t;
      return true;
    }
  }
  // vLLM (GPU; CPU from its offloading connectors and MooncakeStore's worker), SGLang HiCache
  // (GPU, CPU_PINNED, DISK, EXTERNAL: its L1/L2/L3), LMCache (cpu, disk, remote).
  static constexpr std::pair<absl::string_view, Tier> kBuiltIn[] = {
      {"gpu", Tier::kGpu},      {"cpu", Tier::kHost},    {"cpu_pinned", Tier::kHost},
      {"host", Tier::kHost},    {"disk", Tier::kStore},  {"external", Tier::kStore},
      {"remote", Tier::kStore}, {"store", Tier::kStore},
  };
  for (const auto& [name, t] : kBuiltIn) {
    if (absl::EqualsIgnoreCase(*medium, name)) {
      *tier = t;
      return true;
    }
  }
  return false;
}

uint32_t EventApplier::UsableBlockSize(const BlockStored& event) {
  const size_t n = event.block_hashes.size();
  uint32_t block_size = event.block_size;
  if (block_size == 0 && n > 0 && event.token_ids.size() % n == 0) {
    block_size = static_cast<uint32_t>(event.token_ids.size() / n);
  }
  return n > 0 && block_size > 0 && event.token_ids.size() == n * block_size ? block_size : 0;
}

void EventApplier::HashBlocks(const BlockStored& event, std::string_view model,
                              const BlockHash* parent, uint32_t block_size) {
  const uint64_t seed =
      parent != nullptr
          ? *parent
          : TokenRootSeed(event.lora_name ? std::string_view(*event.lora_name) : model);
  scratch_.clear();
  kvindex::HashTokenBlocks(event.token_ids, seed, block_size, &scratch_);
}

EventApplier::Route EventApplier::RouteStored(HolderState& state, const BlockStored& event,
                                              kvindex::GroupSpec* spec) {
  const int64_t group = event.group_idx.value_or(0);
  if (!event.kv_cache_spec_kind) {
    // Without a kind (vLLM before PR #40984) only group 0 is known to be full attention.
    if (group != 0 || (state.full_group >= 0 && state.full_group != 0)) return Route::kIgnore;
    state.full_group = 0;
    return Route::kIndex;
  }
  if (!kvindex::ParseGroupKind(*event.kv_cache_spec_kind, &spec->kind)) return Route::kIgnore;
  if (spec->kind == kvindex::GroupKind::kFullAttention &&
      (state.full_group < 0 || state.full_group == group)) {
    state.full_group = group;
    return Route::kIndex;
  }
  if (spec->kind == kvindex::GroupKind::kSlidingWindow) {
    if (event.kv_cache_spec_sliding_window.value_or(0) <= 0) return Route::kIgnore;
    spec->sliding_window = static_cast<uint32_t>(
        std::min<int64_t>(*event.kv_cache_spec_sliding_window, int64_t{1} << 30));
  }
  return Route::kOther;
}

EventApplier::Route EventApplier::RouteRemoved(const HolderState& state,
                                               const std::optional<int64_t>& group_idx) {
  const int64_t group = group_idx.value_or(0);
  if (group == (state.full_group < 0 ? 0 : state.full_group)) return Route::kIndex;
  return state.others.contains(group) ? Route::kOther : Route::kIgnore;
}

namespace {
// The index's name of a BlockTree view: a tier, or nullopt for "any tier".
std::optional<Tier> ViewTier(int view) {
  return view == BlockTree::kAnyTier ? std::nullopt : std::optional<Tier>(Tier(view));
}
}  // namespace

kvindex::Closure EventApplier::MarkOpen(Holder holder, HolderState& state) {
  for (int v = 0; v < BlockTree::kViews; ++v) {
    if ((state.tree.holes(v) > 0 || !state.tree.exact()) && state.told_closed[v]) {
      index_.SetPrefixClosed(holder, ViewTier(v), false);
      state.told_closed[v] = false;
    }
  }
  return state.tree.exact() ? kvindex::Closure::kCallerTracks : kvindex::Closure::kGuess;
}

void EventApplier::MarkClosed(Holder holder, HolderState& state) {
  if (!state.tree.exact()) return;
  for (int v = 0; v < BlockTree::kViews; ++v) {
    if (state.tree.holes(v) == 0 && !state.told_closed[v]) {
      index_.SetPrefixClosed(holder, ViewTier(v), true);
      state.told_closed[v] = true;
    }
  }
}

ApplyResult EventApplier::Apply(Holder holder, std::string_view model, const EventBatch& batch) {
  ApplyResult result;
  result.ignored_events = batch.ignored_events;
  common::MutexLock lock(&mu_);
  HolderState& state = holders_[holder];
  for (const KvEvent& event : batch.events) {
    if (const auto* stored = std::get_if<BlockStored>(&event)) {
      ApplyStored(holder, state, model, *stored, result);
    } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
      ApplyRemoved(holder, state, *removed, result);
    } else {
      ApplyCleared(holder, state, std::get<AllBlocksCleared>(event), result);
    }
  }
  return result;
}

void EventApplier::ApplyStored(Holder holder, HolderState& state, std::string_view model,
                               const BlockStored& event, ApplyResult& result) {
  Tier tier;
  kvindex::GroupSpec spec;
  const Route route =
      TierOf(event.medium, &tier) ? RouteStored(state, event, &spec) : Route::kIgnore;
  if (route == Route::kIgnore || (route == Route::kOther && groups_ == nullptr)) {
    ++result.ignored_events;
    return;
  }
  if (route == Route::kOther) {
    StoreOther(holder, state, event.group_idx.value_or(0), spec, model, event, tier, result);
    return;
  }
  const size_t n = event.block_hashes.size();
  const uint32_t block_size = UsableBlockSize(event);
  if (block_size == 0) {
    result.orphan_blocks += n;  // Cannot be re-hashed.
    return;
  }
  state.last_block_size = block_size;
  std::optional<BlockHash> parent;
  if (event.parent_block_hash) {
    parent = state.tree.HashOf(*event.parent_block_hash);
    if (!parent) {
      result.orphan_blocks += n;  // Its prefix was stored before kvgate listened.
      return;
    }
  }
  HashBlocks(event, model, parent ? &*parent : nullptr, block_size);
  state.tree.AddRun(event.block_hashes, event.parent_block_hash, scratch_, tier);
  // The index refuses a 65th holder; the engine-id map still lets removals stay consistent.
  (void)index_.InsertAfter(holder, parent, scratch_, tier, MarkOpen(holder, state));
  MarkClosed(holder, state);
  result.stored_blocks += n;
}

void EventApplier::ApplyRemoved(Holder holder, HolderState& state, const BlockRemoved& event,
                                ApplyResult& result) {
  Tier tier;
  const Route route =
      TierOf(event.medium, &tier) ? RouteRemoved(state, event.group_idx) : Route::kIgnore;
  if (route == Route::kIgnore) {
    ++result.ignored_events;
    return;
  }
  scratch_.clear();
  if (route == Route::kIndex) {
    for (EngineBlockId id : event.block_hashes) {
      BlockHash hash;
      switch (state.tree.Drop(id, tier, &hash)) {
        case BlockTree::Dropped::kBlock:
          scratch_.push_back(hash);
          break;
        case BlockTree::Dropped::kCopy:
          break;  // Another copy is still cached.
        case BlockTree::Dropped::kNotHeld:
          ++result.unknown_removals;
          break;
      }
    }
    index_.Remove(holder, scratch_, tier, MarkOpen(holder, state));
    MarkClosed(holder, state);
    result.removed_blocks += scratch_.size();
    return;
  }
  const int64_t group = event.group_idx.value_or(0);
  auto& blocks = state.others[group].blocks;
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (EngineBlockId id : event.block_hashes) {
    auto it = blocks.find(id);
    if (it == blocks.end() || (it->second.tiers & bit) == 0) {
      ++result.unknown_removals;
      continue;
    }
    if (it->second.copies.TakeCopy(tier)) continue;  // Another copy is still cached.
    scratch_.push_back(it->second.hash);
    it->second.tiers &= static_cast<uint8_t>(~bit);
    if (it->second.tiers == 0) blocks.erase(it);
  }
  groups_->Remove(holder, static_cast<uint32_t>(group), scratch_, tier);
  result.removed_blocks += scratch_.size();
}

void EventApplier::ApplyCleared(Holder holder, HolderState& state, const AllBlocksCleared& event,
                                ApplyResult& result) {
  ++result.cleared;
  if (!event.medium) {
    index_.ClearHolder(holder);
    state.tree.Clear();
    state.told_closed = {true, true, true, true};
    for (auto& [group, other] : state.others) other.blocks.clear();
    if (groups_ != nullptr) groups_->Clear(holder, Tier::kGpu, /*all=*/true);
    return;
  }
  Tier tier;
  if (!TierOf(event.medium, &tier)) {
    ++result.ignored_events;
    return;
  }
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (auto& [group, other] : state.others) {
    absl::erase_if(other.blocks, [bit, tier](auto& entry) {
      entry.second.tiers &= static_cast<uint8_t>(~bit);
      entry.second.copies.Cleared(tier);
      return entry.second.tiers == 0;
    });
  }
  if (groups_ != nullptr) groups_->Clear(holder, tier, /*all=*/false);
  scratch_.clear();
  state.tree.DropTier(tier, &scratch_);
  index_.Remove(holder, scratch_, tier, MarkOpen(holder, state));
  MarkClosed(holder, state);
}

void EventApplier::StoreOther(Holder holder, HolderState& state, int64_t group,
                              const kvindex::GroupSpec& spec, std::string_view model,
                              const BlockStored& event, Tier tier, ApplyResult& result) {
  const size_t n = event.block_hashes.size();
  const uint32_t block_size = UsableBlockSize(event);
  if (block_size == 0) {
    result.orphan_blocks += n;
    return;
  }
  OtherGroup& other = state.others[group];
  if (other.blocks.size() + n > kMaxGroupBlocks) {
    result.orphan_blocks += n;  // A publisher that never removes: bounded, counted.
    return;
  }
  other.spec = spec;
  const BlockHash* parent = nullptr;
  std::optional<BlockHash> full_parent;
  if (event.parent_block_hash) {
    // The parent need not be in this group: a Mamba checkpoint's parent is the block before it,
    // which only full attention kept, and a window's first block follows positions it never
    // held. The engine's id names one position in every group, so any group's map says where.
    if (auto it = other.blocks.find(*event.parent_block_hash); it != other.blocks.end()) {
      parent = &it->second.hash;
    } else if (full_parent = state.tree.HashOf(*event.parent_block_hash); full_parent) {
      parent = &*full_parent;
    } else {
      for (const auto& [index, g] : state.others) {
        if (auto o = g.blocks.find(*event.parent_block_hash); o != g.blocks.end()) {
          parent = &o->second.hash;
          break;
        }
      }
    }
    if (parent == nullptr) {
      result.orphan_blocks += n;
      return;
    }
  }
  HashBlocks(event, model, parent, block_size);
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (size_t i = 0; i < n; ++i) {
    Block& b = other.blocks[event.block_hashes[i]];
    b.hash = scratch_[i];
    b.copies.Stored(tier, (b.tiers & bit) != 0);
    b.tiers |= bit;
  }
  groups_->Store(holder, static_cast<uint32_t>(group), spec, block_size, scratch_, tier);
  result.stored_blocks += n;
}

void EventApplier::Forget(Holder holder) {
  common::MutexLock lock(&mu_);
  holders_.erase(holder);
  index_.ClearHolder(holder);
  if (groups_ != nullptr) groups_->Forget(holder);
}

std::vector<EngineBlockId> EventApplier::EngineBlocks(Holder holder, Tier tier) const {
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? std::vector<EngineBlockId>{} : it->second.tree.Held(tier);
}

std::array<uint64_t, kvindex::kNumTiers> EventApplier::BlockCounts(Holder holder) const {
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? std::array<uint64_t, kvindex::kNumTiers>{}
                              : it->second.tree.counts();
}

uint32_t EventApplier::LastBlockSize(Holder holder) const {
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? 0 : it->second.last_block_size;
}

}  // namespace kvgate::kvevents
