// File: transfer/task.h
// Progress of requests inside a batch, shared by the engine (which creates and reports) and the
// transports (which drive). Both classes are thread-safe.
//
// Lifetime rule: a transport calls Task::Begin(n) once, then exactly n of SliceDone/SliceFailed,
// from any threads. The n-th call makes the task terminal; it must be the transport's last access
// to the task and to the task's local and remote memory. A Batch stays alive (it holds a
// reference to itself) while any of its tasks is not terminal, so FreeBatch() never frees memory
// a transport still uses.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "transfer/types.h"

namespace kvgate::transfer {

class Batch;

class Task {
 public:
  Task() = default;
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  /// The transport that takes the task; call before Begin(). `name` must outlive the engine.
  void SetTransport(std::string_view name) { transport_ = name; }
  /// Moves the task to kPending with `slices` outstanding parts (at least 1).
  void Begin(uint32_t slices);
  void SliceDone(uint64_t bytes);
  /// Keeps the first error; kDeadlineExceeded makes the task kTimedOut, anything else kFailed
  /// (a failure among the slices wins over a time-out).
  void SliceFailed(absl::Status error);
  /// For a task no transport took: Begin(1) + SliceFailed(error).
  void Fail(absl::Status error);

  TaskStatus Status() const;

 private:
  friend class Batch;
  void Finish();

  Batch* batch_ = nullptr;
  std::string_view transport_;  // Written before Begin(); read after state_ left kWaiting.
  std::atomic<TaskState> state_{TaskState::kWaiting};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint32_t> outstanding_{0};
  mutable common::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool timed_out_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

class Batch : public std::enable_shared_from_this<Batch> {
 public:
  Batch(BatchId id, uint32_t capacity, std::chrono::milliseconds timeout, uint64_t flow);
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  BatchId id() const { return id_; }
  uint32_t capacity() const { return capacity_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// The caller's flow (AllocateBatch), or one of the batch's own when it named none.
  uint64_t flow() const { return flow_; }

  /// Reserves the next `n` task slots, in kWaiting; returns the first index.
  /// @return kInvalidArgument past capacity; kNotFound once freed.
  absl::StatusOr<uint32_t> Reserve(uint32_t n);
  Task& task(uint32_t index) { return tasks_[index]; }
  /// @return kInvalidArgument for an index never reserved.
  absl::StatusOr<TaskStatus> TaskStatusAt(uint32_t index) const;
  BatchStatus Status() const;
  /// Blocks until every reserved task is terminal or `deadline` passes; the status then.
  BatchStatus Wait(Clock::time_point deadline);
  /// Marks the batch freed unless a task is still unfinished.
  /// @return kFailedPrecondition naming the count of unfinished tasks.
  absl::Status MarkFreed();

 private:
  friend class Task;
  void OnTaskFinished();

  const BatchId id_;
  const uint32_t capacity_;
  const std::chrono::milliseconds timeout_;
  const uint64_t flow_;
  std::unique_ptr<Task[]> tasks_;
  std::atomic<uint32_t> reserved_{0};  // Mirrors reserved_locked_ for lock-free readers.
  mutable common::Mutex mu_;
  common::CondVar done_cv_;
  uint32_t reserved_locked_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  bool freed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Batch> self_ ABSL_GUARDED_BY(mu_);  // Set while unfinished_ > 0.
};

}  // namespace kvgate::transfer
