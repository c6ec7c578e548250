// File: router/runtime/snapshot_lease.h
// Keeps one published snapshot alive for as long as a request of a gateway thread uses it: a
// reload never frees a worker that a running request still holds. Counting is per thread and
// not atomic, so taking a lease costs no cross-thread traffic (ThreadContext::Lease()).
// Move-only; thread-compatible (used and destroyed on the thread that took it).
#pragma once

#include <cstdint>
#include <memory>

namespace kvgate::router {

struct Snapshot;
class ThreadContext;

class SnapshotLease {
 public:
  /// A thread's entry for one snapshot: the reference and its local users.
  struct Entry {
    std::shared_ptr<const Snapshot> snapshot;
    int64_t users = 0;
  };

  SnapshotLease() = default;
  SnapshotLease(SnapshotLease&& o) noexcept : tc_(o.tc_), entry_(o.entry_) { o.tc_ = nullptr; }
  SnapshotLease& operator=(SnapshotLease&& o) noexcept;
  SnapshotLease(const SnapshotLease&) = delete;
  SnapshotLease& operator=(const SnapshotLease&) = delete;
  ~SnapshotLease();

  const Snapshot& operator*() const { return *entry_->snapshot; }
  const Snapshot* operator->() const { return entry_->snapshot.get(); }
  explicit operator bool() const { return tc_ != nullptr; }

 private:
  friend class ThreadContext;
  SnapshotLease(ThreadContext* tc, Entry* entry) : tc_(tc), entry_(entry) {}
  ThreadContext* tc_ = nullptr;
  Entry* entry_ = nullptr;
};

}  // namespace kvgate::router
