// File: transfer/memory_registry.h
// The buffers this engine registered: what local requests may name and what remote peers may
// read or write. Thread-safe (one reader/writer mutex); buffers are shared_ptr so that a
// transport serving a remote request keeps its buffer alive while it copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "transfer/types.h"

namespace kvgate::transfer {

/// One registered buffer. Immutable once registered.
struct LocalBuffer {
  uint64_t addr = 0;
  uint64_t length = 0;
  MemoryLocation location;
  uint64_t id = 0;  // Unique in this registry.
  int memfd = -1;   // >= 0 for managed buffers: memfd-backed, shareable with same-host peers.

  LocalBuffer() = default;
  LocalBuffer(const LocalBuffer&) = delete;
  LocalBuffer& operator=(const LocalBuffer&) = delete;
  /// Managed buffers are unmapped and their memfd closed here.
  ~LocalBuffer();

  bool managed() const { return memfd >= 0; }
  uint8_t* data() const { return reinterpret_cast<uint8_t*>(addr); }
  bool Contains(uint64_t a, uint64_t len) const {
    return len > 0 && a >= addr && a - addr <= length && len <= length - (a - addr);
  }
};

using LocalBufferPtr = std::shared_ptr<const LocalBuffer>;

class MemoryRegistry {
 public:
  /// Registers caller-owned memory. @return kInvalidArgument for null, zero length, wrap-around
  /// or overlap with a registered buffer (the message names both ranges).
  absl::StatusOr<LocalBufferPtr> Add(void* addr, uint64_t length, MemoryLocation location);
  /// Allocates `length` bytes (rounded up to pages) in a fresh memfd mapping and registers it.
  /// @return kResourceExhausted when memfd_create/ftruncate/mmap fail.
  absl::StatusOr<LocalBufferPtr> AddManaged(uint64_t length);
  /// @return kNotFound unless `addr` is the start of a registered buffer.
  absl::StatusOr<LocalBufferPtr> Remove(const void* addr);
  /// The buffer containing all of [addr, addr + length), or null.
  LocalBufferPtr Find(uint64_t addr, uint64_t length) const;
  std::vector<LocalBufferPtr> List() const;

 private:
  absl::Status CheckFreeLocked(uint64_t addr, uint64_t length) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable common::SharedMutex mu_;
  absl::btree_map<uint64_t, LocalBufferPtr> buffers_ ABSL_GUARDED_BY(mu_);  // By addr.
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvgate::transfer
