// File: store/range_allocator.h
// First-fit allocation of byte ranges in one data node's pool, with neighbouring free ranges
// merged on release. Offsets are from the pool's start and aligned to kAlignment. O(free ranges)
// per allocation, which stays small because objects of one model have one or two sizes.
// Thread-compatible (the master serialises it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace kvgate::store {

class RangeAllocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  explicit RangeAllocator(uint64_t capacity);

  /// @return the offset of `length` free bytes (rounded up to kAlignment), or nullopt.
  std::optional<uint64_t> Allocate(uint64_t length);
  /// Takes the given range (re-registration after a failover). @return false if any of it is
  /// not free.
  bool AllocateAt(uint64_t offset, uint64_t length);
  /// Returns a range handed out by Allocate/AllocateAt (same length).
  void Release(uint64_t offset, uint64_t length);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

  static uint64_t Rounded(uint64_t length) {
    return (length + kAlignment - 1) / kAlignment * kAlignment;
  }

 private:
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
};

}  // namespace kvgate::store
