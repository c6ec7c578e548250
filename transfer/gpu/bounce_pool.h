// File: transfer/gpu/bounce_pool.h
// Fixed-size host staging buffers for moving device memory over a transport with no direct path
// to it (tcp): pinned through the GPU runtime when it can, plain heap memory otherwise. Freed
// chunks are kept for reuse up to a cap. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace kvgate::transfer {

class GpuRuntime;

class BouncePool {
 public:
  /// `runtime` may be null (heap chunks only) and must outlive the pool.
  BouncePool(GpuRuntime* runtime, uint64_t chunk_bytes, uint32_t max_cached);
  ~BouncePool();
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;

  class Chunk {
   public:
    Chunk() = default;
    Chunk(Chunk&& o) noexcept : pool_(o.pool_), data_(o.data_) { o.pool_ = nullptr; }
    Chunk& operator=(Chunk&& o) noexcept {
      std::swap(pool_, o.pool_);
      std::swap(data_, o.data_);
      return *this;
    }
    ~Chunk() {
      if (pool_ != nullptr) pool_->Release(data_);
    }
    uint8_t* data() const { return data_; }
    explicit operator bool() const { return pool_ != nullptr; }

   private:
    friend class BouncePool;
    Chunk(BouncePool* pool, uint8_t* data) : pool_(pool), data_(data) {}
    BouncePool* pool_ = nullptr;
    uint8_t* data_ = nullptr;
  };

  /// A chunk of chunk_bytes(); never fails (falls back to the heap).
  Chunk Acquire();
  uint64_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Block {
    uint8_t* data;
    bool pinned;
  };
  void Release(uint8_t* data);

  GpuRuntime* const runtime_;
  const uint64_t chunk_bytes_;
  const uint32_t max_cached_;
  common::Mutex mu_;
  std::vector<uint8_t*> free_ ABSL_GUARDED_BY(mu_);
  std::vector<Block> all_ ABSL_GUARDED_BY(mu_);  // Every live chunk, to free the right way.
};

}  // namespace kvgate::transfer
