#include "transfer/copy_pool.h"

#include <algorithm>
#include <cstring>

#include "common/mutex.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/metrics.h"
#include "transfer/task.h"

namespace kvgate::transfer {

absl::Status CopyBytes(CopyEnd dst, CopyEnd src, uint64_t length) {
  GpuRuntime* rt = dst.runtime != nullptr ? dst.runtime : src.runtime;
  if (rt != nullptr) return rt->Copy(dst.ptr, src.ptr, length);
  std::memcpy(dst.ptr, src.ptr, length);
  return absl::OkStatus();
}

CopyPool::CopyPool(CopyPoolParams params) : params_(params) {
  for (uint32_t i = 0; i < params_.threads; ++i) threads_.emplace_back([this] { Worker(); });
}

CopyPool::~CopyPool() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  for (auto& t : threads_) t.join();
}

void CopyPool::Run(uint64_t flow, std::deque<Job> chunks) {
  common::MutexLock lock(&mu_);
  // Flows queued at once are few (one per caller): a scan finds this one's.
  auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Flow& f) { return f.id == flow; });
  if (it == jobs_.end()) {
    jobs_.push_back({flow, std::move(chunks)});
  } else {
    for (Job& j : chunks) it->chunks.push_back(std::move(j));
  }
  cv_.SignalAll();  // Every worker may take a chunk of it.
}

void CopyPool::Worker() {
  for (;;) {
    Job job;
    {
      common::MutexLock lock(&mu_);
      while (!stop_ && jobs_.empty()) cv_.Wait(&mu_);
      if (jobs_.empty()) return;  // stop_ and drained.
      Flow& flow = jobs_.front();
      job = std::move(flow.chunks.front());
      flow.chunks.pop_front();
      if (flow.chunks.empty()) {
        jobs_.pop_front();
      } else if (jobs_.size() > 1) {
        jobs_.push_back(std::move(flow));  // Its next chunk after one of every other flow's.
        jobs_.pop_front();
      }
    }
    std::move(job)();
  }
}

void CopyPool::Copy(Task* task, TransferOp op, CopyEnd dst, CopyEnd src, uint64_t length,
                    std::shared_ptr<const void> keep_alive, TransportStats* stats, uint64_t flow) {
  const auto finish = [task, op, stats](absl::Status st, uint64_t n) {
    if (st.ok()) {
      stats->CountBytes(op, n);
      task->SliceDone(n);
    } else {
      stats->failures.fetch_add(1, std::memory_order_relaxed);
      task->SliceFailed(std::move(st));
    }
  };
  if (threads_.empty() || length <= params_.inline_max_bytes) {
    task->Begin(1);
    finish(CopyBytes(dst, src, length), length);
    return;
  }
  const uint64_t chunk = params_.chunk_bytes > 0 ? params_.chunk_bytes : length;
  const auto chunks = static_cast<uint32_t>((length + chunk - 1) / chunk);
  task->Begin(chunks);
  std::deque<Job> jobs;
  for (uint32_t i = 0; i < chunks; ++i) {
    const uint64_t off = uint64_t{i} * chunk;
    const uint64_t n = std::min(chunk, length - off);
    CopyEnd d{static_cast<uint8_t*>(dst.ptr) + off, dst.runtime};
    CopyEnd s{static_cast<uint8_t*>(src.ptr) + off, src.runtime};
    jobs.emplace_back([d, s, n, finish, keep_alive]() mutable { finish(CopyBytes(d, s, n), n); });
  }
  Run(flow, std::move(jobs));
}

}  // namespace kvgate::transfer
