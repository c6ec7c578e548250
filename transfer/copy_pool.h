// File: transfer/copy_pool.h
// Worker threads for the copying transports (local, shm): Submit() stays asynchronous for large
// copies, which are cut into chunks spread over the workers. Small copies run inline, since a
// thread hop costs more than the copy. Workers take chunks round robin over the copies queued,
// so a copy waits for one chunk of each other flow (TransferTask::flow), not for all of a large
// one. Thread-safe;
// owned by the engine.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "transfer/types.h"

namespace kvgate::transfer {

class GpuRuntime;
class Task;
struct TransportStats;

struct CopyPoolParams {
  uint32_t threads = 2;                 // 0: every copy inline in Submit().
  uint64_t inline_max_bytes = 1 << 20;  // Copies up to this size run in the caller: a thread
                                        // hop costs more than ~100 us of copying.
  uint64_t chunk_bytes = 4 << 20;       // Larger copies are cut into chunks of this size.
};

/// One side of a copy: host memory, or device memory through `runtime`.
struct CopyEnd {
  void* ptr = nullptr;
  GpuRuntime* runtime = nullptr;  // Non-null for device memory.
};

class CopyPool {
 public:
  explicit CopyPool(CopyPoolParams params);
  /// Runs what is queued, then joins the workers.
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  /// Copies `length` bytes src -> dst for `task` (which this call Begin()s), inline or on the
  /// workers; `keep_alive` is held until the last chunk is done (e.g. a peer's mapping). The
  /// workers take chunks round robin between flows.
  void Copy(Task* task, TransferOp op, CopyEnd dst, CopyEnd src, uint64_t length,
            std::shared_ptr<const void> keep_alive, TransportStats* stats, uint64_t flow = 0);

  const CopyPoolParams& params() const { return params_; }

 private:
  using Job = absl::AnyInvocable<void() &&>;
  struct Flow {
    uint64_t id = 0;
    std::deque<Job> chunks;  // Never empty while queued.
  };
  void Run(uint64_t flow, std::deque<Job> chunks);
  void Worker();

  const CopyPoolParams params_;
  common::Mutex mu_;
  common::CondVar cv_;
  std::deque<Flow> jobs_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

/// One synchronous copy: memcpy, or the runtime of whichever side is device memory.
absl::Status CopyBytes(CopyEnd dst, CopyEnd src, uint64_t length);

}  // namespace kvgate::transfer
