#include "transfer/local/local_transport.h"

#include "common/strings.h"
#include "transfer/copy_pool.h"
#include "transfer/memory_registry.h"
#include "transfer/task.h"

namespace kvgate::transfer {

Capabilities LocalTransport::GetCapabilities() const {
  Capabilities c;
  c.same_process_only = true;
  c.local_device_memory = true;
  c.remote_device_memory = true;
  c.zero_copy = true;
  return c;
}

absl::Status LocalTransport::Start(const TransportContext& context) {
  context_ = context;
  return absl::OkStatus();
}

bool LocalTransport::CanReach(const SegmentDescriptor& peer) const {
  return peer.instance == context_.instance;
}

bool LocalTransport::CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const {
  return peer.instance == context_.instance;
}

absl::Status LocalTransport::Submit(const SegmentDescriptorPtr& peer,
                                    absl::Span<const TransferTask> tasks) {
  for (const TransferTask& t : tasks) {
    stats_.CountRequest(t.op);
    // The published descriptor may lag an UnregisterMemory(); the registry is the truth here.
    LocalBufferPtr remote = context_.registry->Find(t.remote_addr, t.length);
    if (remote == nullptr) {
      stats_.failures.fetch_add(1, std::memory_order_relaxed);
      t.task->Fail(absl::OutOfRangeError(
          fmt::format("local: segment '{}' has no registered buffer covering [{:#x}, +{}) for {}",
                      context_.segment_name, t.remote_addr, t.length, OpName(t.op))));
      continue;
    }
    CopyEnd local{t.local, context_.RuntimeFor(t.local_location)};
    CopyEnd other{reinterpret_cast<void*>(t.remote_addr), context_.RuntimeFor(remote->location)};
    if (t.op == TransferOp::kRead) {
      context_.copy_pool->Copy(t.task, t.op, local, other, t.length, remote, &stats_, t.flow);
    } else {
      context_.copy_pool->Copy(t.task, t.op, other, local, t.length, remote, &stats_, t.flow);
    }
  }
  return absl::OkStatus();
}

}  // namespace kvgate::transfer
