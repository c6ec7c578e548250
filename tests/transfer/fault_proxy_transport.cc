#include "tests/transfer/fault_proxy_transport.h"

#include <thread>
#include <vector>

#include "common/mutex.h"
#include "transfer/task.h"

namespace kvgate::transfer::testing {

FaultProxyTransport::FaultProxyTransport(TransportPtr inner, FaultPolicy policy)
    : inner_(std::move(inner)), policy_(policy), rng_(policy.seed) {}

absl::Status FaultProxyTransport::Submit(const SegmentDescriptorPtr& peer,
                                         absl::Span<const TransferTask> tasks) {
  if (policy_.submit_delay_us > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(policy_.submit_delay_us));
  }
  std::vector<bool> fail(tasks.size(), false);
  {
    common::MutexLock lock(&mu_);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const bool over = policy_.fail_after_n_submits >= 0 && submits_ >= policy_.fail_after_n_submits;
    ++submits_;
    if (over || u(rng_) < policy_.submit_fail_rate) {
      refused_.fetch_add(1);
      return absl::UnavailableError("fault proxy: submit refused");
    }
    for (size_t i = 0; i < tasks.size(); ++i) fail[i] = u(rng_) < policy_.task_fail_rate;
  }
  std::vector<TransferTask> pass;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (fail[i]) {
      failed_.fetch_add(1);
      tasks[i].task->Fail(absl::UnavailableError("fault proxy: task failed"));
    } else {
      pass.push_back(tasks[i]);
    }
  }
  if (pass.empty()) return absl::OkStatus();
  absl::Status st = inner_->Submit(peer, pass);
  if (st.ok() || pass.size() == tasks.size()) return st;
  // Some tasks were already failed here, so this refusal cannot go back to the engine.
  for (const TransferTask& t : pass) t.task->Fail(st);
  return absl::OkStatus();
}

}  // namespace kvgate::transfer::testing
