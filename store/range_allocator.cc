// File: store/range_allocator.cc
#include "store/range_allocator.h"

#include <iterator>

namespace kvgate::store {

RangeAllocator::RangeAllocator(uint64_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t length) {
  if (length == 0) return std::nullopt;
  const uint64_t n = Rounded(length);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - n;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + n, rest);
    used_ += n;
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::AllocateAt(uint64_t offset, uint64_t length) {
  const uint64_t n = Rounded(length);
  if (length == 0 || offset % kAlignment != 0 || offset > capacity_ || n > capacity_ - offset)
    return false;
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) return false;
  --it;
  const uint64_t start = it->first, len = it->second;
  if (offset + n > start + len) return false;
  free_.erase(it);
  if (offset > start) free_.emplace(start, offset - start);
  if (start + len > offset + n) free_.emplace(offset + n, start + len - offset - n);
  used_ += n;
  return true;
}

void RangeAllocator::Release(uint64_t offset, uint64_t length) {
  uint64_t n = Rounded(length);
  used_ -= n;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      n += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + n == next->first) {
    n += next->second;
    free_.erase(next);
  }
  free_.emplace(offset, n);
}

}  // namespace kvgate::store
