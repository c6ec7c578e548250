// File: router/runtime/buffer_pool.h
// Fixed-size byte blocks reused by one gateway thread: client request buffers and response
// write-backs take a block while they hold bytes and give it back when they are empty, so an
// idle keep-alive connection or a stream waiting for its next event holds no buffer.
// Thread-compatible (one pool per gateway thread).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace kvgate::router {

class BufferPool {
 public:
  static constexpr size_t kBlockBytes = 16 * 1024;

  /// A block of kBlockBytes (reused when one is free).
  std::unique_ptr<char[]> Take() {
    if (free_.empty()) return std::make_unique_for_overwrite<char[]>(kBlockBytes);
    std::unique_ptr<char[]> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  /// Returns a block from Take(); kept for reuse up to a bound.
  void Give(std::unique_ptr<char[]> block) {
    if (block && free_.size() < kMaxFree) free_.push_back(std::move(block));
  }
  size_t free_blocks() const { return free_.size(); }

 private:
  static constexpr size_t kMaxFree = 256;  // 4 MiB kept per thread at most
  std::vector<std::unique_ptr<char[]>> free_;
};

}  // namespace kvgate::router
