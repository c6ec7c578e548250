#include "kvevents/block_tree.h"

#include <algorithm>
#include <cstdint>

namespace kvgate::kvevents {

BlockTree::Block* BlockTree::ParentOf(const Block& b) {
  if (!b.has_parent) return nullptr;
  auto p = blocks_.find(b.parent);
  if (p != blocks_.end()) return &p->second;
  exact_ = false;  // A held block's parent is always kept; an id was reused.
  return nullptr;
}

bool BlockTree::Unused(const Block& b) {
  if (b.tiers != 0) return false;
  for (uint16_t c : b.children) {
    if (c != 0) return false;
  }
  return true;
}

void BlockTree::Enter(Block& b, Block* p, int view) {
  if (p != nullptr) {
    if (p->children[view] == UINT16_MAX) {
      exact_ = false;  // Counted no further: Leave then finds the count wrong.
    } else {
      ++p->children[view];
    }
    if (!Holds(*p, view)) ++holes_[view];
  }
  // Its children held in this view were holes until now.
  if (holes_[view] < b.children[view]) exact_ = false;
  holes_[view] -= std::min<uint64_t>(holes_[view], b.children[view]);
}

void BlockTree::Leave(Block& b, Block* p, int view) {
  holes_[view] += b.children[view];
  if (p == nullptr) return;
  if (p->children[view] == 0) {
    exact_ = false;
    return;
  }
  --p->children[view];
  if (!Holds(*p, view)) {
    if (holes_[view] == 0) exact_ = false;
    holes_[view] -= std::min<uint64_t>(holes_[view], 1);
  }
}

void BlockTree::AddRun(absl::Span<const EngineBlockId> ids, std::optional<EngineBlockId> parent,
                       absl::Span<const kvindex::BlockHash> hashes, kvindex::Tier tier) {
  const auto t = static_cast<int>(tier);
  const uint8_t bit = uint8_t{1} << t;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, inserted] = blocks_.try_emplace(ids[i]);
    Block& b = it->second;
    if (inserted) {
      b.hash = hashes[i];
      b.has_parent = parent.has_value();
      b.parent = parent.value_or(0);
      if (parent == ids[i]) exact_ = false;
    } else if (b.has_parent != parent.has_value() || (parent && b.parent != *parent) ||
               b.hash != hashes[i]) {
      // The same id under another prefix: the parent links no longer describe the index.
      exact_ = false;
      b.hash = hashes[i];
    }
    b.copies.Stored(tier, (b.tiers & bit) != 0);
    if ((b.tiers & bit) == 0) {
      Block* p = ParentOf(b);  // Found again: an insert may have moved the previous entry.
      const bool was_held = b.tiers != 0;
      b.tiers |= bit;
      ++counts_[t];
      Enter(b, p, t);
      if (!was_held) Enter(b, p, kAnyTier);
    }
    parent = ids[i];
  }
}

BlockTree::Dropped BlockTree::Drop(EngineBlockId id, kvindex::Tier tier, kvindex::BlockHash* hash) {
  auto it = blocks_.find(id);
  const auto t = static_cast<int>(tier);
  const uint8_t bit = uint8_t{1} << t;
  if (it == blocks_.end() || (it->second.tiers & bit) == 0) return Dropped::kNotHeld;
  Block& b = it->second;
  if (b.copies.TakeCopy(tier)) return Dropped::kCopy;
  *hash = b.hash;
  Block* p = ParentOf(b);
  b.tiers &= static_cast<uint8_t>(~bit);
  --counts_[t];
  Leave(b, p, t);
  if (b.tiers == 0) Leave(b, p, kAnyTier);
  // Erasing leaves the other entries where they are, `p` among them.
  const bool parent_unused = p != nullptr && p != &b && Unused(*p);
  const EngineBlockId parent = b.parent;
  if (Unused(b)) blocks_.erase(it);
  if (parent_unused) blocks_.erase(parent);
  return Dropped::kBlock;
}

void BlockTree::DropTier(kvindex::Tier tier, std::vector<kvindex::BlockHash>* hashes) {
  for (EngineBlockId id : Held(tier)) {
    blocks_.find(id)->second.copies.Cleared(tier);  // Held: the id is in the map.
    kvindex::BlockHash h;
    if (Drop(id, tier, &h) == Dropped::kBlock) hashes->push_back(h);
  }
}

void BlockTree::Clear() {
  blocks_.clear();
  holes_ = {};
  counts_ = {};
  exact_ = true;
}

std::optional<kvindex::BlockHash> BlockTree::HashOf(EngineBlockId id) const {
  auto it = blocks_.find(id);
  if (it == blocks_.end() || it->second.tiers == 0) return std::nullopt;
  return it->second.hash;
}

std::vector<EngineBlockId> BlockTree::Held(kvindex::Tier tier) const {
  std::vector<EngineBlockId> out;
  const uint8_t bit = uint8_t{1} << static_cast<int>(tier);
  for (const auto& [id, b] : blocks_) {
    if ((b.tiers & bit) != 0) out.push_back(id);
  }
  return out;
}

}  // namespace kvgate::kvevents
