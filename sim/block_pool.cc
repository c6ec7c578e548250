#include "sim/block_pool.h"

#include <algorithm>

namespace kvgate::sim {

KvEvent BlockPool::Removed(uint64_t hash, Medium medium) const {
  KvEvent ev;
  ev.type = KvEvent::Type::kBlockRemoved;
  ev.block_hashes = {hash};
  ev.block_size = block_size_;
  ev.medium = medium;
  return ev;
}

BlockPool::BlockPool(uint32_t num_gpu_blocks, uint32_t num_cpu_blocks, uint32_t block_size,
                     std::vector<KvEvent>* events, std::optional<GroupTag> tag)
    : num_blocks_(num_gpu_blocks),
      num_cpu_blocks_(num_cpu_blocks),
      block_size_(block_size),
      events_(events),
      tag_(std::move(tag)),
      blocks_(num_gpu_blocks),
      tokens_(size_t{num_gpu_blocks} * block_size) {
  for (uint32_t i = 0; i < num_blocks_; ++i) PushFreeTail(static_cast<int32_t>(i));
}

void BlockPool::Emit(KvEvent event) {
  if (tag_ && event.type != KvEvent::Type::kAllBlocksCleared) {
    event.group_idx = tag_->group_idx;
    if (event.type == KvEvent::Type::kBlockStored) {
      event.kv_cache_spec_kind = tag_->kind;
      event.kv_cache_spec_sliding_window = tag_->sliding_window;
    }
  }
  events_->push_back(std::move(event));
}

double BlockPool::Usage() const {
  return num_blocks_ == 0 ? 0.0 : 1.0 - static_cast<double>(num_free_) / num_blocks_;
}

void BlockPool::PushFreeTail(int32_t id) {
  Block& b = blocks_[id];
  b.free = true;
  b.prev = free_tail_;
  b.next = -1;
  if (free_tail_ >= 0) {
    blocks_[free_tail_].next = id;
  } else {
    free_head_ = id;
  }
  free_tail_ = id;
  ++num_free_;
}

void BlockPool::Unlink(int32_t id) {
  Block& b = blocks_[id];
  if (b.prev >= 0) {
    blocks_[b.prev].next = b.next;
  } else {
    free_head_ = b.next;
  }
  if (b.next >= 0) {
    blocks_[b.next].prev = b.prev;
  } else {
    free_tail_ = b.prev;
  }
  b.prev = b.next = -1;
  b.free = false;
  --num_free_;
}

size_t BlockPool::GpuPrefix(absl::Span<const uint64_t> hashes) const {
  size_t n = 0;
  while (n < hashes.size() && cached_.contains(hashes[n])) ++n;
  return n;
}

size_t BlockPool::HostPrefix(absl::Span<const uint64_t> hashes, size_t start) const {
  size_t n = start;
  while (n < hashes.size() && host_.contains(hashes[n])) ++n;
  return n - start;
}

uint32_t BlockPool::NumFreeAmong(absl::Span<const uint64_t> hashes) const {
  uint32_t n = 0;
  for (uint64_t h : hashes) n += blocks_[cached_.at(h).front()].free ? 1 : 0;
  return n;
}

void BlockPool::AcquireCached(absl::Span<const uint64_t> hashes, std::vector<int32_t>* blocks) {
  for (uint64_t h : hashes) {
    const int32_t id = cached_.at(h).front();
    if (blocks_[id].free) Unlink(id);
    ++blocks_[id].ref;
    blocks->push_back(id);
  }
}

void BlockPool::AddCopy(int32_t id, uint64_t hash) {
  Block& b = blocks_[id];
  b.hash = hash;
  b.cached = true;
  cached_[hash].push_back(id);
}

void BlockPool::EvictCached(int32_t id) {
  Block& b = blocks_[id];
  auto it = cached_.find(b.hash);
  it->second.erase(std::find(it->second.begin(), it->second.end(), id));
  if (it->second.empty()) cached_.erase(it);
  b.cached = false;
  Emit(Removed(b.hash, Medium::kGpu));
  if (num_cpu_blocks_ > 0) {
    StoreInHost(b.hash, b.has_parent ? std::optional<uint64_t>(b.parent) : std::nullopt,
                &tokens_[size_t{static_cast<uint32_t>(id)} * block_size_]);
  }
}

void BlockPool::StoreInHost(uint64_t hash, std::optional<uint64_t> parent, const uint32_t* tokens) {
  if (auto it = host_.find(hash); it != host_.end()) {
    host_lru_.splice(host_lru_.end(), host_lru_, it->second);
    return;
  }
  if (host_.size() >= num_cpu_blocks_) {
    const uint64_t victim = host_lru_.front().hash;
    host_.erase(victim);
    host_lru_.pop_front();
    Emit(Removed(victim, Medium::kCpu));
  }
  host_lru_.push_back(HostEntry{hash, parent, std::vector<uint32_t>(tokens, tokens + block_size_)});
  host_[hash] = std::prev(host_lru_.end());
  KvEvent ev;
  ev.type = KvEvent::Type::kBlockStored;
  ev.block_hashes = {hash};
  ev.parent_block_hash = parent;
  ev.token_ids = host_lru_.back().tokens;
  ev.block_size = block_size_;
  ev.medium = Medium::kCpu;
  Emit(std::move(ev));
}

void BlockPool::Allocate(uint32_t n, std::vector<int32_t>* blocks) {
  for (uint32_t i = 0; i < n && free_head_ >= 0; ++i) {
    const int32_t id = free_head_;
    Unlink(id);
    if (blocks_[id].cached) EvictCached(id);
    blocks_[id].ref = 1;
    blocks_[id].has_parent = false;
    blocks->push_back(id);
  }
}

void BlockPool::LoadFromHost(absl::Span<const uint64_t> hashes, std::optional<uint64_t> parent,
                             std::vector<int32_t>* blocks) {
  // Copy the entries first: the allocation below may evict GPU blocks into the host tier, which
  // may in turn evict host entries.
  std::vector<uint32_t> tokens;
  tokens.reserve(hashes.size() * block_size_);
  for (uint64_t h : hashes) {
    auto it = host_.at(h);
    tokens.insert(tokens.end(), it->tokens.begin(), it->tokens.end());
    host_lru_.splice(host_lru_.end(), host_lru_, it);
  }
  const size_t first = blocks->size();
  Allocate(static_cast<uint32_t>(hashes.size()), blocks);
  KvEvent ev;
  ev.type = KvEvent::Type::kBlockStored;
  ev.parent_block_hash = parent;
  ev.block_size = block_size_;
  ev.medium = Medium::kGpu;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const int32_t id = (*blocks)[first + i];
    Block& b = blocks_[id];
    std::copy_n(&tokens[i * block_size_], block_size_,
                &tokens_[size_t{static_cast<uint32_t>(id)} * block_size_]);
    const std::optional<uint64_t> p = i == 0 ? parent : std::optional<uint64_t>(hashes[i - 1]);
    b.has_parent = p.has_value();
    b.parent = p.value_or(0);
    AddCopy(id, hashes[i]);  // Another request may have cached it meanwhile: a second copy.
    ev.block_hashes.push_back(hashes[i]);
    ev.token_ids.insert(ev.token_ids.end(), &tokens[i * block_size_],
                        &tokens[(i + 1) * block_size_]);
  }
  if (!ev.block_hashes.empty()) Emit(std::move(ev));
}

void BlockPool::CacheBlocks(absl::Span<const int32_t> blocks, absl::Span<const uint64_t> hashes,
                            absl::Span<const uint32_t> tokens, size_t first, size_t last) {
  CacheRange([&](size_t i) { return blocks[i]; }, hashes, tokens, first, last);
}

void BlockPool::CacheBlock(int32_t id, absl::Span<const uint64_t> hashes,
                           absl::Span<const uint32_t> tokens, size_t pos) {
  CacheRange([id](size_t) { return id; }, hashes, tokens, pos, pos + 1);
}

void BlockPool::CacheRange(absl::FunctionRef<int32_t(size_t)> block_at,
                           absl::Span<const uint64_t> hashes, absl::Span<const uint32_t> tokens,
                           size_t first, size_t last) {
  KvEvent ev;
  auto flush = [&] {
    if (!ev.block_hashes.empty()) Emit(std::move(ev));
    ev = KvEvent{};
  };
  for (size_t i = first; i < last; ++i) {
    const int32_t id = block_at(i);
    if (id < 0) {  // Null: a position this request no longer holds.
      flush();
      continue;
    }
    Block& b = blocks_[id];
    const uint32_t* src = &tokens[i * block_size_];
    std::copy_n(src, block_size_, &tokens_[size_t{static_cast<uint32_t>(id)} * block_size_]);
    b.has_parent = i > 0;
    b.parent = i > 0 ? hashes[i - 1] : 0;
    if (b.cached) {  // Already announced (a hit this request took).
      flush();
      continue;
    }
    AddCopy(id, hashes[i]);
    if (ev.block_hashes.empty()) {
      ev.type = KvEvent::Type::kBlockStored;
      ev.parent_block_hash = i > 0 ? std::optional<uint64_t>(hashes[i - 1]) : std::nullopt;
      ev.block_size = block_size_;
      ev.medium = Medium::kGpu;
    }
    ev.block_hashes.push_back(hashes[i]);
    ev.token_ids.insert(ev.token_ids.end(), src, src + block_size_);
  }
  flush();
}

void BlockPool::Free(absl::Span<const int32_t> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it < 0) continue;
    Block& b = blocks_[*it];
    if (--b.ref == 0) PushFreeTail(*it);
  }
}

void BlockPool::ResetPrefixCache(bool emit) {
  for (auto& [hash, ids] : cached_) {
    for (int32_t id : ids) blocks_[id].cached = false;
  }
  cached_.clear();
  host_.clear();
  host_lru_.clear();
  if (!emit) return;
  KvEvent ev;
  ev.type = KvEvent::Type::kAllBlocksCleared;
  Emit(std::move(ev));
}

std::vector<uint64_t> BlockPool::CachedHashes(Medium medium) const {
  std::vector<uint64_t> out;
  if (medium == Medium::kGpu) {
    for (const auto& [hash, ids] : cached_) out.push_back(hash);
  } else {
    for (const auto& e : host_lru_) out.push_back(e.hash);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvgate::sim
