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

EventApplier::EventApplier(kvindex::PrefixIndex& index, ApplierOptions options)
    : index_(index), options_(std::move(options)) {}

bool EventApplier::TierOf(const std::optional<std::string>& medium, Tier* tier) const {
  if (!medium || absl::EqualsIgnoreCase(*medium, "gpu")) {
    *tier = Tier::kGpu;  // vLLM's MEDIUM_GPU; no medium is the engine's own cache.
    return true;
  }
  if (absl::EqualsIgnoreCase(*medium, "cpu")) {
    *tier = Tier::kHost;
    return true;
  }
  for (const auto& [name, t] : options_.media) {
    if (absl::EqualsIgnoreCase(*medium, name)) {
      *tier = t;
      return true;
    }
  }
  return false;
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
  // Hybrid models cache several groups; only the full-attention group 0 is a prefix cache.
  if (!TierOf(event.medium, &tier) || event.group_idx.value_or(0) != 0) {
    ++result.ignored_events;
    return;
  }
  const size_t n = event.block_hashes.size();
  uint32_t block_size = event.block_size;
  if (block_size == 0 && n > 0 && event.token_ids.size() % n == 0) {
    block_size = static_cast<uint32_t>(event.token_ids.size() / n);
  }
  if (n == 0 || block_size == 0 || event.token_ids.size() != n * block_size) {
    result.orphan_blocks += n;  // Cannot be re-hashed.
    return;
  }
  state.last_block_size = block_size;
  std::optional<BlockHash> parent;
  uint64_t seed;
  if (event.parent_block_hash) {
    auto it = state.blocks.find(*event.parent_block_hash);
    if (it == state.blocks.end()) {
      result.orphan_blocks += n;  // Its prefix was stored before kvgate listened.
      return;
    }
    parent = it->second.hash;
    seed = it->second.hash;
  } else {
    seed = TokenRootSeed(event.lora_name ? std::string_view(*event.lora_name) : model);
  }
  scratch_.clear();
  kvindex::HashTokenBlocks(event.token_ids, seed, block_size, &scratch_);
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (size_t i = 0; i < n; ++i) {
    Block& b = state.blocks[event.block_hashes[i]];
    b.hash = scratch_[i];
    if ((b.tiers & bit) == 0) {
      b.tiers |= bit;
      ++state.counts[static_cast<int>(tier)];
    }
  }
  // The index refuses a 65th holder; the engine-id map still lets removals stay consistent.
  (void)index_.InsertAfter(holder, parent, scratch_, tier);
  result.stored_blocks += n;
}

void EventApplier::ApplyRemoved(Holder holder, HolderState& state, const BlockRemoved& event,
                                ApplyResult& result) {
  Tier tier;
  if (!TierOf(event.medium, &tier) || event.group_idx.value_or(0) != 0) {
    ++result.ignored_events;
    return;
  }
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  scratch_.clear();
  for (EngineBlockId id : event.block_hashes) {
    auto it = state.blocks.find(id);
    if (it == state.blocks.end() || (it->second.tiers & bit) == 0) {
      ++result.unknown_removals;
      continue;
    }
    scratch_.push_back(it->second.hash);
    it->second.tiers &= static_cast<uint8_t>(~bit);
    --state.counts[static_cast<int>(tier)];
    if (it->second.tiers == 0) state.blocks.erase(it);
  }
  index_.Remove(holder, scratch_, tier);
  result.removed_blocks += scratch_.size();
}

void EventApplier::ApplyCleared(Holder holder, HolderState& state, const AllBlocksCleared& event,
                                ApplyResult& result) {
  ++result.cleared;
  if (!event.medium) {
    index_.ClearHolder(holder);
    state.blocks.clear();
    state.counts = {};
    return;
  }
  Tier tier;
  if (!TierOf(event.medium, &tier)) {
    ++result.ignored_events;
    return;
  }
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  scratch_.clear();
  for (auto it = state.blocks.begin(); it != state.blocks.end();) {
    if (it->second.tiers & bit) {
      scratch_.push_back(it->second.hash);
      it->second.tiers &= static_cast<uint8_t>(~bit);
    }
    if (it->second.tiers == 0) {
      state.blocks.erase(it++);
    } else {
      ++it;
    }
  }
  index_.Remove(holder, scratch_, tier);
  state.counts[static_cast<int>(tier)] = 0;
}

void EventApplier::Forget(Holder holder) {
  common::MutexLock lock(&mu_);
  holders_.erase(holder);
  index_.ClearHolder(holder);
}

std::vector<EngineBlockId> EventApplier::EngineBlocks(Holder holder, Tier tier) const {
  std::vector<EngineBlockId> out;
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  if (it == holders_.end()) return out;
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (const auto& [id, block] : it->second.blocks) {
    if (block.tiers & bit) out.push_back(id);
  }
  return out;
}

std::array<uint64_t, kvindex::kNumTiers> EventApplier::BlockCounts(Holder holder) const {
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? std::array<uint64_t, kvindex::kNumTiers>{} : it->second.counts;
}

uint32_t EventApplier::LastBlockSize(Holder holder) const {
  common::MutexLock lock(&mu_);
  auto it = holders_.find(holder);
  return it == holders_.end() ? 0 : it->second.last_block_size;
}

}  // namespace kvgate::kvevents
