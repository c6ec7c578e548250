#include "transfer/gpu/bounce_pool.h"

#include <algorithm>

#include "common/mutex.h"
#include "transfer/gpu/gpu_runtime.h"

namespace kvgate::transfer {

BouncePool::BouncePool(GpuRuntime* runtime, uint64_t chunk_bytes, uint32_t max_cached)
    : runtime_(runtime), chunk_bytes_(chunk_bytes), max_cached_(max_cached) {}

BouncePool::~BouncePool() {
  common::MutexLock lock(&mu_);
  for (const Block& b : all_) {
    if (b.pinned) {
      runtime_->FreePinned(b.data);
    } else {
      delete[] b.data;
    }
  }
}

BouncePool::Chunk BouncePool::Acquire() {
  {
    common::MutexLock lock(&mu_);
    if (!free_.empty()) {
      uint8_t* p = free_.back();
      free_.pop_back();
      return Chunk(this, p);
    }
  }
  Block b{nullptr, false};
  if (runtime_ != nullptr) {
    auto p = runtime_->AllocPinned(chunk_bytes_);
    if (p.ok()) b = {static_cast<uint8_t*>(*p), true};
  }
  if (b.data == nullptr) b.data = new uint8_t[chunk_bytes_];
  common::MutexLock lock(&mu_);
  all_.push_back(b);
  return Chunk(this, b.data);
}

void BouncePool::Release(uint8_t* data) {
  common::MutexLock lock(&mu_);
  if (free_.size() < max_cached_) {
    free_.push_back(data);
    return;
  }
  auto it = std::find_if(all_.begin(), all_.end(), [&](const Block& b) { return b.data == data; });
  if (it == all_.end()) return;
  if (it->pinned) {
    runtime_->FreePinned(data);
  } else {
    delete[] data;
  }
  all_.erase(it);
}

}  // namespace kvgate::transfer
