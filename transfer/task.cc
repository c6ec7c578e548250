#include "transfer/task.h"

#include "common/assert.h"
#include "common/mutex.h"
#include "common/strings.h"

namespace kvgate::transfer {

void Task::Begin(uint32_t slices) {
  KVGATE_ASSERT(slices > 0, "a task has at least one slice");
  outstanding_.store(slices, std::memory_order_relaxed);
  state_.store(TaskState::kPending, std::memory_order_release);
}

void Task::SliceDone(uint64_t bytes) {
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish();
}

void Task::SliceFailed(absl::Status error) {
  {
    common::MutexLock lock(&mu_);
    const bool timeout = absl::IsDeadlineExceeded(error);
    // The first real failure is the one reported; a time-out only until a failure arrives.
    if (!timeout && !failed_) {
      error_ = std::move(error);
    } else if (timeout && error_.ok()) {
      error_ = std::move(error);
    }
    (timeout ? timed_out_ : failed_) = true;
  }
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish();
}

void Task::Fail(absl::Status error) {
  Begin(1);
  SliceFailed(std::move(error));
}

void Task::Finish() {
  TaskState final_state = TaskState::kCompleted;
  {
    common::MutexLock lock(&mu_);
    if (failed_) {
      final_state = TaskState::kFailed;
    } else if (timed_out_) {
      final_state = TaskState::kTimedOut;
    }
  }
  state_.store(final_state, std::memory_order_release);
  batch_->OnTaskFinished();
}

TaskStatus Task::Status() const {
  TaskStatus s;
  s.state = state_.load(std::memory_order_acquire);
  s.bytes_done = bytes_.load(std::memory_order_relaxed);
  if (s.state != TaskState::kWaiting) s.transport = transport_;
  if (s.state == TaskState::kFailed || s.state == TaskState::kTimedOut) {
    common::MutexLock lock(&mu_);
    s.error = error_;
  }
  return s;
}

Batch::Batch(BatchId id, uint32_t capacity, std::chrono::milliseconds timeout, uint64_t flow)
    : id_(id),
      capacity_(capacity),
      timeout_(timeout),
      // Flows a caller names are below 2^63; a batch that names none is a flow of its own.
      flow_(flow != 0 ? flow : (uint64_t{1} << 63) | static_cast<uint64_t>(id)),
      tasks_(new Task[capacity]) {
  for (uint32_t i = 0; i < capacity; ++i) tasks_[i].batch_ = this;
}

absl::StatusOr<uint32_t> Batch::Reserve(uint32_t n) {
  common::MutexLock lock(&mu_);
  if (freed_) {
    return absl::NotFoundError(common::StrCat("batch ", static_cast<uint64_t>(id_), " was freed"));
  }
  if (n > capacity_ - reserved_locked_) {
    return absl::InvalidArgumentError(
        common::StrCat("batch ", static_cast<uint64_t>(id_), " holds ", capacity_,
                       " requests: ", reserved_locked_, " submitted, ", n, " more do not fit"));
  }
  const uint32_t first = reserved_locked_;
  reserved_locked_ += n;
  reserved_.store(reserved_locked_, std::memory_order_release);
  if (n > 0 && unfinished_ == 0) self_ = shared_from_this();
  unfinished_ += n;
  return first;
}

absl::StatusOr<TaskStatus> Batch::TaskStatusAt(uint32_t index) const {
  if (index >= reserved_.load(std::memory_order_acquire)) {
    return absl::InvalidArgumentError(
        common::StrCat("batch ", static_cast<uint64_t>(id_), " has no task ", index));
  }
  return tasks_[index].Status();
}

BatchStatus Batch::Status() const {
  BatchStatus s;
  s.tasks = reserved_.load(std::memory_order_acquire);
  bool pending = false;
  for (uint32_t i = 0; i < s.tasks; ++i) {
    const TaskStatus t = tasks_[i].Status();
    s.bytes_done += t.bytes_done;
    switch (t.state) {
      case TaskState::kCompleted:
        ++s.completed;
        break;
      case TaskState::kFailed:
        ++s.failed;
        if (s.first_error.ok()) s.first_error = t.error;
        break;
      case TaskState::kTimedOut:
        ++s.timed_out;
        if (s.first_error.ok()) s.first_error = t.error;
        break;
      default:
        pending = true;
    }
  }
  if (s.tasks == 0) {
    s.state = TaskState::kWaiting;
  } else if (pending) {
    s.state = TaskState::kPending;
  } else if (s.failed > 0) {
    s.state = TaskState::kFailed;
  } else if (s.timed_out > 0) {
    s.state = TaskState::kTimedOut;
  } else {
    s.state = TaskState::kCompleted;
  }
  return s;
}

BatchStatus Batch::Wait(Clock::time_point deadline) {
  {
    common::MutexLock lock(&mu_);
    while (unfinished_ > 0) {
      const auto now = Clock::now();
      if (now >= deadline) break;
      done_cv_.WaitUntil(&mu_, deadline);
    }
  }
  return Status();
}

absl::Status Batch::MarkFreed() {
  common::MutexLock lock(&mu_);
  if (unfinished_ > 0) {
    return absl::FailedPreconditionError(
        common::StrCat("batch ", static_cast<uint64_t>(id_), " still has ", unfinished_,
                       " unfinished tasks; wait for them before freeing it"));
  }
  freed_ = true;
  return absl::OkStatus();
}

void Batch::OnTaskFinished() {
  std::shared_ptr<Batch> last_ref;  // Released after the lock, possibly destroying *this.
  {
    common::MutexLock lock(&mu_);
    if (--unfinished_ == 0) {
      last_ref = std::move(self_);
      done_cv_.SignalAll();
    }
  }
}

}  // namespace kvgate::transfer
