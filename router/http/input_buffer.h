// File: router/http/input_buffer.h
// Bytes read from a client and not yet consumed. Small requests live in a pooled block
// (BufferPool) that is given back whenever the buffer empties, so idle connections hold no
// memory; a large body gets a buffer of its own size. The bytes after the readable ones stay
// readable (`spare()`), which lets simdjson parse a body in place. Thread-compatible.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

#include "common/assert.h"
#include "router/runtime/buffer_pool.h"

namespace kvgate::router {

class InputBuffer {
 public:
  std::string_view data() const { return {storage_.get() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  /// Bytes of storage after data() ends (readable padding).
  size_t spare() const { return capacity_ - end_; }

  /// Room to read at least `min` more bytes (up to `want`, at least what is free); may move
  /// the data, invalidating views into it (see generation()).
  std::pair<char*, size_t> Prepare(size_t min, size_t want, BufferPool& pool) {
    if (storage_ == nullptr) {
      if (std::max(min, want) <= BufferPool::kBlockBytes) {
        storage_ = pool.Take();
        capacity_ = BufferPool::kBlockBytes;
        pooled_ = true;
      } else {
        Grow(std::max(min, want), pool);
      }
    } else if (capacity_ - end_ < min) {
      if (begin_ > 0 && capacity_ - size() >= std::max(min, want)) {
        std::memmove(storage_.get(), storage_.get() + begin_, size());
        end_ -= begin_;
        begin_ = 0;
        ++generation_;
      } else {
        Grow(size() + std::max(min, want), pool);
      }
    }
    return {storage_.get() + end_, capacity_ - end_};
  }
  void Commit(size_t n) {
    KVGATE_ASSERT(end_ + n <= capacity_, "committed past the prepared room");
    end_ += n;
  }
  /// Drops `n` bytes from the front; gives the storage back once nothing is left.
  void Consume(size_t n, BufferPool& pool) {
    KVGATE_ASSERT(n <= size(), "consumed more than was read");
    begin_ += n;
    if (begin_ >= end_) Release(pool);
  }
  void Release(BufferPool& pool) {
    if (pooled_) pool.Give(std::move(storage_));
    storage_.reset();
    begin_ = end_ = capacity_ = 0;
    pooled_ = false;
    ++generation_;
  }
  /// Changes whenever data() may have moved.
  uint64_t generation() const { return generation_; }
  bool holds_storage() const { return storage_ != nullptr; }

 private:
  void Grow(size_t need, BufferPool& pool) {
    const size_t cap = std::max(need, capacity_ * 2);
    auto bigger = std::make_unique_for_overwrite<char[]>(cap);
    if (size() > 0) std::memcpy(bigger.get(), storage_.get() + begin_, size());
    if (pooled_) pool.Give(std::move(storage_));
    end_ = size();
    begin_ = 0;
    storage_ = std::move(bigger);
    capacity_ = cap;
    pooled_ = false;
    ++generation_;
  }

  std::unique_ptr<char[]> storage_;
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t capacity_ = 0;
  bool pooled_ = false;
  uint64_t generation_ = 0;
};

}  // namespace kvgate::router
