#include "transfer/transfer_engine.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"
#include "transfer/local/local_transport.h"
#include "transfer/memory_registry.h"
#include "transfer/rdma/rdma_transport.h"
#include "transfer/shm/shm_transport.h"
#include "transfer/task.h"
#include "transfer/tcp/tcp_transport.h"

namespace kvgate::transfer {
namespace {

constexpr uint32_t kMaxBatchRequests = 1u << 20;
// A request outside the cached descriptor re-reads the metadata at most this often per segment,
// so a caller looping on bad offsets cannot hammer etcd.
constexpr auto kMinRefreshInterval = std::chrono::milliseconds(50);

std::string NewInstanceId() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  return fmt::format("{}-{:016x}", getpid(), r);
}

// One open peer segment. `mu` guards the descriptor and route, which a refresh replaces.
struct OpenSegmentState {
  std::string name;
  mutable common::Mutex mu;
  SegmentDescriptorPtr desc ABSL_GUARDED_BY(mu);
  std::vector<Transport*> route ABSL_GUARDED_BY(mu);  // Transports that reach it, best first.
  Clock::time_point refreshed ABSL_GUARDED_BY(mu);
  bool stale ABSL_GUARDED_BY(mu) = false;  // A transport could not reach it: re-read first.
};

// A task on its way to a transport, and the first route index still worth trying.
struct PendingTask {
  TransferTask task;
  size_t next_route = 0;
};

}  // namespace

struct TransferEngine::Impl {
  TransferEngineOptions options;
  std::string instance = NewInstanceId();
  std::string host_id = LocalHostId();
  MemoryRegistry registry;
  std::unique_ptr<CopyPool> copy_pool;
  GpuRuntimePtr cuda;
  GpuRuntimePtr hip;
  std::string cuda_reason = "built without CUDA";
  std::string hip_reason = "built without HIP";
  SegmentMetadataPtr metadata;
  std::vector<TransportPtr> transports;  // Best first.
  std::vector<std::pair<std::string, std::string>> unavailable;

  // Own descriptor: rebuilt and published under publish_mu on every registration change.
  common::Mutex publish_mu;
  uint64_t version ABSL_GUARDED_BY(publish_mu) = 0;
  SegmentDescriptorPtr own ABSL_GUARDED_BY(publish_mu);

  mutable common::Mutex mu;  // Lock order: mu before OpenSegmentState::mu; never publish_mu inside.
  absl::flat_hash_map<uint64_t, std::shared_ptr<OpenSegmentState>> segments ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, uint64_t> segment_ids ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Batch>> batches ABSL_GUARDED_BY(mu);
  uint64_t next_segment ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_batch ABSL_GUARDED_BY(mu) = 1;

  absl::Status Init();
  absl::Status AddTransport(const std::string& name, const TransportContext& ctx);
  absl::Status Publish();
  SegmentDescriptorPtr OwnDescriptor() {
    common::MutexLock lock(&publish_mu);
    return own;
  }
  absl::StatusOr<SegmentDescriptorPtr> FetchDescriptor(const std::string& name);
  absl::Status Refresh(OpenSegmentState& seg);
  std::shared_ptr<OpenSegmentState> FindSegment(SegmentId id) const {
    common::MutexLock lock(&mu);
    auto it = segments.find(static_cast<uint64_t>(id));
    return it == segments.end() ? nullptr : it->second;
  }
  absl::StatusOr<std::shared_ptr<Batch>> FindBatch(BatchId id) const {
    common::MutexLock lock(&mu);
    auto it = batches.find(static_cast<uint64_t>(id));
    if (it == batches.end()) {
      return absl::NotFoundError(
          common::StrCat("batch ", static_cast<uint64_t>(id), " was never allocated or is freed"));
    }
    return it->second;
  }
  void Dispatch(OpenSegmentState& seg, const SegmentDescriptorPtr& desc,
                const std::vector<Transport*>& route, std::vector<PendingTask> pending);
  absl::Status CheckDeviceMemory(void* addr, uint64_t length, MemoryLocation loc);
};

absl::Status TransferEngine::Impl::Init() {
  if (options.segment_name.empty()) {
    return absl::InvalidArgumentError("transfer engine: segment_name is required");
  }
  if (options.metadata != nullptr) {
    metadata = std::move(options.metadata);
  } else {
    auto md = OpenSegmentMetadata(options.metadata_uri);
    if (!md.ok()) return md.status();
    metadata = std::move(*md);
  }
  if (options.cuda_runtime != nullptr) {
    cuda = std::move(options.cuda_runtime);
  } else if (options.load_gpu_runtimes) {
    auto rt = LoadCudaRuntime();
    if (rt.ok()) {
      cuda = std::move(*rt);
    } else {
      cuda_reason = std::string(rt.status().message());
    }
  }
  if (options.load_gpu_runtimes) {
    auto rt = LoadHipRuntime();
    if (rt.ok()) {
      hip = std::move(*rt);
    } else {
      hip_reason = std::string(rt.status().message());
    }
  }
  copy_pool = std::make_unique<CopyPool>(options.copy);

  TransportContext ctx;
  ctx.segment_name = options.segment_name;
  ctx.instance = instance;
  ctx.host_id = host_id;
  ctx.registry = &registry;
  ctx.copy_pool = copy_pool.get();
  ctx.cuda = cuda.get();
  ctx.hip = hip.get();
  ctx.verify_crc32c = options.verify_crc32c;
  ctx.auth = options.auth;
  for (const std::string& name : options.transports) {
    if (std::any_of(transports.begin(), transports.end(),
                    [&](const TransportPtr& t) { return t->Name() == name; })) {
      return absl::InvalidArgumentError(common::StrCat("transport '", name, "' listed twice"));
    }
    if (auto st = AddTransport(name, ctx); !st.ok()) return st;
  }
  if (transports.empty()) {
    std::string why;
    for (const auto& [name, reason] : unavailable) common::StrAppend(&why, " ", name, ": ", reason);
    return absl::UnavailableError(common::StrCat("transfer engine: no transport can run;", why));
  }
  return Publish();
}

absl::Status TransferEngine::Impl::AddTransport(const std::string& name,
                                                const TransportContext& ctx) {
  absl::StatusOr<TransportPtr> t;
  if (name == "local") {
    t = TransportPtr(std::make_unique<LocalTransport>());
  } else if (name == "shm") {
    t = CreateShmTransport(options.shm);
  } else if (name == "tcp") {
    t = CreateTcpTransport(options.tcp);
  } else if (name == "rdma") {
    t = CreateRdmaTransport(options.rdma);
  } else {
    return absl::InvalidArgumentError(
        common::StrCat("unknown transport '", name, "' (expected local, shm, tcp or rdma)"));
  }
  absl::Status st = t.ok() ? (*t)->Start(ctx) : t.status();
  if (!st.ok()) {
    // Not offered: one line says why (no RDMA device, no listen port, ...).
    spdlog::info("transfer: transport {} not offered: {}", name, st.message());
    unavailable.emplace_back(name, std::string(st.message()));
    return absl::OkStatus();
  }
  TransportPtr transport = std::move(*t);
  if (options.wrap_transport) transport = options.wrap_transport(std::move(transport));
  transports.push_back(std::move(transport));
  return absl::OkStatus();
}

absl::Status TransferEngine::Impl::Publish() {
  common::MutexLock lock(&publish_mu);
  auto desc = std::make_shared<SegmentDescriptor>();
  desc->name = options.segment_name;
  desc->instance = instance;
  desc->host_id = host_id;
  desc->version = ++version;
  const bool shm = std::any_of(transports.begin(), transports.end(),
                               [](const TransportPtr& t) { return t->Name() == "shm"; });
  for (const LocalBufferPtr& b : registry.List()) {
    BufferDesc d;
    d.addr = b->addr;
    d.length = b->length;
    d.location = b->location.ToString();
    d.id = b->id;
    d.shm = shm && b->managed();
    desc->buffers.push_back(std::move(d));
  }
  for (const TransportPtr& t : transports) t->Describe(*desc);
  own = desc;
  return metadata->Publish(*desc);
}

absl::StatusOr<SegmentDescriptorPtr> TransferEngine::Impl::FetchDescriptor(
    const std::string& name) {
  if (name == options.segment_name) return OwnDescriptor();
  auto desc = metadata->Lookup(name);
  if (!desc.ok()) return desc.status();
  return SegmentDescriptorPtr(std::make_shared<SegmentDescriptor>(std::move(*desc)));
}

absl::Status TransferEngine::Impl::Refresh(OpenSegmentState& seg) {
  auto desc = FetchDescriptor(seg.name);
  if (!desc.ok()) return desc.status();
  std::vector<Transport*> route;
  for (const TransportPtr& t : transports) {
    if (t->CanReach(**desc)) route.push_back(t.get());
  }
  SegmentDescriptorPtr old;
  {
    common::MutexLock lock(&seg.mu);
    old = seg.desc;
    seg.refreshed = Clock::now();
    seg.stale = false;
    if (!route.empty()) {
      seg.desc = *desc;
      seg.route = route;
    }
  }
  if (old != nullptr && old->instance != (*desc)->instance) {
    for (const TransportPtr& t : transports) t->ForgetPeer(*old);
  }
  if (route.empty()) {
    std::vector<std::string> ours;
    for (const TransportPtr& t : transports) ours.emplace_back(t->Name());
    return absl::UnavailableError(common::StrCat(
        "segment '", seg.name, "' cannot be reached by any transport of this engine (",
        common::StrJoin(ours, ", "), "): it offers tcp '", (*desc)->tcp_endpoint, "', shm '",
        (*desc)->shm_socket, "', rdma '", (*desc)->rdma_endpoint, "'"));
  }
  return absl::OkStatus();
}

absl::Status TransferEngine::Impl::CheckDeviceMemory(void* addr, uint64_t length,
                                                     MemoryLocation loc) {
  GpuRuntime* rt = loc.kind == MemoryKind::kCuda ? cuda.get() : hip.get();
  if (rt == nullptr) {
    return absl::FailedPreconditionError(
        common::StrCat("cannot register ", loc.ToString(),
                       " memory: ", loc.kind == MemoryKind::kCuda ? cuda_reason : hip_reason));
  }
  if (loc.device >= rt->DeviceCount()) {
    return absl::InvalidArgumentError(
        common::StrCat(loc.ToString(), ": only ", rt->DeviceCount(), " ", rt->Name(), " devices"));
  }
  return rt->CheckDeviceRange(addr, length, loc.device);
}

// Hands tasks to the first transport of the route that can carry each; on a refused Submit the
// same tasks go on to the next one. Tasks nothing carries fail with the last refusal.
void TransferEngine::Impl::Dispatch(OpenSegmentState& seg, const SegmentDescriptorPtr& desc,
                                    const std::vector<Transport*>& route,
                                    std::vector<PendingTask> pending) {
  absl::Status last_error = absl::UnavailableError(common::StrCat(
      "segment '", seg.name, "': no transport of this engine can carry the request"));
  while (!pending.empty()) {
    // Bucket by the transport each task goes to next; route is short (<= 4).
    std::vector<std::vector<PendingTask>> buckets(route.size());
    for (PendingTask& p : pending) {
      size_t j = p.next_route;
      while (j < route.size() && !route[j]->CanCarry(*desc, p.task)) ++j;
      if (j == route.size()) {
        p.task.task->Fail(last_error);
        continue;
      }
      p.next_route = j + 1;
      buckets[j].push_back(p);
    }
    pending.clear();
    for (size_t j = 0; j < route.size(); ++j) {
      if (buckets[j].empty()) continue;
      std::vector<TransferTask> tasks;
      tasks.reserve(buckets[j].size());
      for (PendingTask& p : buckets[j]) {
        p.task.task->SetTransport(route[j]->Name());
        tasks.push_back(p.task);
      }
      absl::Status st = route[j]->Submit(desc, tasks);
      if (st.ok()) continue;
      spdlog::debug("transfer: {} refused {} requests to '{}': {}", route[j]->Name(), tasks.size(),
                    seg.name, st.message());
      last_error = std::move(st);
      {
        common::MutexLock lock(&seg.mu);
        seg.stale = true;  // The peer may have restarted: re-read before the next request.
      }
      for (PendingTask& p : buckets[j]) pending.push_back(std::move(p));
    }
  }
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TransferEngine::~TransferEngine() {
  if (auto st = impl_->metadata->Remove(impl_->options.segment_name); !st.ok()) {
    spdlog::warn("transfer: could not unpublish segment '{}': {}", impl_->options.segment_name,
                 st.message());
  }
  // Transports fail what is in flight and stop their threads before the memory they serve and
  // the copy workers they use go away.
  impl_->transports.clear();
  impl_->copy_pool.reset();
}

absl::StatusOr<std::unique_ptr<TransferEngine>> TransferEngine::Create(
    TransferEngineOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  if (auto st = impl->Init(); !st.ok()) return st;
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl)));
}

const std::string& TransferEngine::segment_name() const { return impl_->options.segment_name; }

absl::Status TransferEngine::RegisterMemory(void* addr, uint64_t length,
                                            std::string_view location) {
  auto loc = ParseLocation(location);
  if (!loc.ok()) return loc.status();
  if (loc->is_device()) {
    if (auto st = impl_->CheckDeviceMemory(addr, length, *loc); !st.ok()) return st;
  }
  auto buf = impl_->registry.Add(addr, length, *loc);
  if (!buf.ok()) return buf.status();
  for (size_t i = 0; i < impl_->transports.size(); ++i) {
    absl::Status st = impl_->transports[i]->RegisterBuffer(**buf);
    if (!st.ok()) {
      for (size_t k = 0; k < i; ++k) impl_->transports[k]->UnregisterBuffer(**buf);
      (void)impl_->registry.Remove(addr);
      return st;
    }
  }
  return impl_->Publish();
}

absl::StatusOr<void*> TransferEngine::AllocateManagedMemory(uint64_t length) {
  auto buf = impl_->registry.AddManaged(length);
  if (!buf.ok()) return buf.status();
  void* addr = (*buf)->data();
  for (size_t i = 0; i < impl_->transports.size(); ++i) {
    absl::Status st = impl_->transports[i]->RegisterBuffer(**buf);
    if (!st.ok()) {
      for (size_t k = 0; k < i; ++k) impl_->transports[k]->UnregisterBuffer(**buf);
      (void)impl_->registry.Remove(addr);
      return st;
    }
  }
  if (auto st = impl_->Publish(); !st.ok()) return st;
  return addr;
}

absl::Status TransferEngine::UnregisterMemory(void* addr) {
  auto buf = impl_->registry.Remove(addr);
  if (!buf.ok()) return buf.status();
  for (const TransportPtr& t : impl_->transports) t->UnregisterBuffer(**buf);
  absl::Status published = impl_->Publish();
  // Remote requests being served hold a reference; wait for them (they end by their deadline).
  const auto deadline = Clock::now() + impl_->options.default_timeout;
  while (buf->use_count() > 1) {
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          fmt::format("buffer {} is unregistered but peers still use it after {} ms", addr,
                      impl_->options.default_timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return published;
}

absl::StatusOr<SegmentId> TransferEngine::OpenSegment(std::string_view name) {
  const std::string key(name);
  std::shared_ptr<OpenSegmentState> seg;
  uint64_t id = 0;
  {
    common::MutexLock lock(&impl_->mu);
    auto it = impl_->segment_ids.find(key);
    if (it != impl_->segment_ids.end()) {
      id = it->second;
      seg = impl_->segments[id];
    }
  }
  if (seg != nullptr) {
    if (auto st = impl_->Refresh(*seg); !st.ok()) return st;
    return static_cast<SegmentId>(id);
  }
  seg = std::make_shared<OpenSegmentState>();
  seg->name = key;
  if (auto st = impl_->Refresh(*seg); !st.ok()) return st;
  common::MutexLock lock(&impl_->mu);
  auto [it, inserted] = impl_->segment_ids.emplace(key, impl_->next_segment);
  if (inserted) impl_->segments[impl_->next_segment++] = seg;  // Else another thread won.
  return static_cast<SegmentId>(it->second);
}

absl::Status TransferEngine::CloseSegment(SegmentId segment) {
  std::shared_ptr<OpenSegmentState> seg;
  {
    common::MutexLock lock(&impl_->mu);
    auto it = impl_->segments.find(static_cast<uint64_t>(segment));
    if (it == impl_->segments.end()) {
      return absl::NotFoundError(
          common::StrCat("segment id ", static_cast<uint64_t>(segment), " is not open"));
    }
    seg = std::move(it->second);
    impl_->segments.erase(it);
    impl_->segment_ids.erase(seg->name);
  }
  common::MutexLock lock(&seg->mu);
  if (seg->desc != nullptr) {
    for (const TransportPtr& t : impl_->transports) t->ForgetPeer(*seg->desc);
  }
  return absl::OkStatus();
}

absl::StatusOr<SegmentDescriptor> TransferEngine::GetSegmentDescriptor(SegmentId segment) const {
  auto seg = impl_->FindSegment(segment);
  if (seg == nullptr) {
    return absl::NotFoundError(
        common::StrCat("segment id ", static_cast<uint64_t>(segment), " is not open"));
  }
  common::MutexLock lock(&seg->mu);
  return *seg->desc;
}

absl::StatusOr<std::vector<std::string>> TransferEngine::SegmentTransports(
    SegmentId segment) const {
  auto seg = impl_->FindSegment(segment);
  if (seg == nullptr) {
    return absl::NotFoundError(
        common::StrCat("segment id ", static_cast<uint64_t>(segment), " is not open"));
  }
  common::MutexLock lock(&seg->mu);
  std::vector<std::string> out;
  for (Transport* t : seg->route) out.emplace_back(t->Name());
  return out;
}

absl::StatusOr<BatchId> TransferEngine::AllocateBatch(
    uint32_t max_requests, std::optional<std::chrono::milliseconds> timeout, uint64_t flow) {
  if (max_requests == 0 || max_requests > kMaxBatchRequests) {
    return absl::InvalidArgumentError(
        common::StrCat("a batch holds 1 to ", kMaxBatchRequests, " requests, not ", max_requests));
  }
  if (flow >= (uint64_t{1} << 63)) {
    return absl::InvalidArgumentError(common::StrCat("batch flow ", flow, " is not below 2^63"));
  }
  const auto t = timeout.value_or(impl_->options.default_timeout);
  if (t.count() <= 0) {
    return absl::InvalidArgumentError(common::StrCat("batch time-out ", t.count(), " ms"));
  }
  common::MutexLock lock(&impl_->mu);
  const uint64_t id = impl_->next_batch++;
  impl_->batches[id] = std::make_shared<Batch>(static_cast<BatchId>(id), max_requests, t, flow);
  return static_cast<BatchId>(id);
}

absl::Status TransferEngine::Submit(BatchId batch_id, absl::Span<const TransferRequest> requests) {
  auto batch = impl_->FindBatch(batch_id);
  if (!batch.ok()) return batch.status();
  if (requests.empty()) return absl::OkStatus();

  // Resolve and check everything before anything starts.
  struct Resolved {
    std::shared_ptr<OpenSegmentState> seg;
    SegmentDescriptorPtr desc;
    std::vector<Transport*> route;
    TransferTask task;
  };
  std::vector<Resolved> resolved(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& r = requests[i];
    Resolved& out = resolved[i];
    if (r.op != TransferOp::kRead && r.op != TransferOp::kWrite) {
      return absl::InvalidArgumentError(common::StrCat("request ", i, ": unknown op"));
    }
    if (r.length == 0) {
      return absl::InvalidArgumentError(common::StrCat("request ", i, ": length 0"));
    }
    LocalBufferPtr local = impl_->registry.Find(reinterpret_cast<uint64_t>(r.local), r.length);
    if (local == nullptr) {
      return absl::InvalidArgumentError(fmt::format(
          "request {}: local range [{}, +{}) is not inside memory registered with engine '{}'", i,
          r.local, r.length, impl_->options.segment_name));
    }
    out.seg = impl_->FindSegment(r.segment);
    if (out.seg == nullptr) {
      return absl::NotFoundError(fmt::format("request {}: segment id {} is not open", i,
                                             static_cast<uint64_t>(r.segment)));
    }
    for (int attempt = 0;; ++attempt) {
      bool refresh = false;
      {
        common::MutexLock lock(&out.seg->mu);
        out.desc = out.seg->desc;
        out.route = out.seg->route;
        out.task.remote_buffer = out.desc->FindRange(r.remote_offset, r.length);
        // Re-read when the range is unknown (the owner may have registered more) or a
        // transport found the peer gone, but not more often than kMinRefreshInterval.
        refresh = attempt == 0 && (out.task.remote_buffer == nullptr || out.seg->stale) &&
                  Clock::now() - out.seg->refreshed >= kMinRefreshInterval;
      }
      if (!refresh) break;
      if (auto st = impl_->Refresh(*out.seg); !st.ok() && !absl::IsUnavailable(st)) {
        spdlog::debug("transfer: refreshing segment '{}': {}", out.seg->name, st.message());
      }
    }
    if (out.task.remote_buffer == nullptr) {
      return absl::OutOfRangeError(fmt::format(
          "request {}: {} of {} bytes at offset {:#x} is outside every buffer segment '{}' "
          "registered (transport {})",
          i, OpName(r.op), r.length, r.remote_offset, out.seg->name,
          out.route.empty() ? "none" : out.route.front()->Name()));
    }
    out.task.op = r.op;
    out.task.local = static_cast<uint8_t*>(r.local);
    out.task.local_location = local->location;
    out.task.remote_addr = r.remote_offset;
    out.task.length = r.length;
    out.task.capability = r.capability;
  }
  auto first = (*batch)->Reserve(static_cast<uint32_t>(requests.size()));
  if (!first.ok()) return first.status();
  const Clock::time_point deadline = Clock::now() + (*batch)->timeout();

  // Group consecutive requests by segment so each transport gets them in one call.
  size_t i = 0;
  while (i < resolved.size()) {
    size_t j = i;
    std::vector<PendingTask> pending;
    while (j < resolved.size() && resolved[j].seg == resolved[i].seg &&
           resolved[j].desc == resolved[i].desc) {
      PendingTask p;
      p.task = resolved[j].task;
      p.task.deadline = deadline;
      p.task.flow = (*batch)->flow();
      p.task.task = &(*batch)->task(*first + static_cast<uint32_t>(j));
      pending.push_back(p);
      ++j;
    }
    impl_->Dispatch(*resolved[i].seg, resolved[i].desc, resolved[i].route, std::move(pending));
    i = j;
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskStatus> TransferEngine::GetTaskStatus(BatchId batch, uint32_t task) const {
  auto b = impl_->FindBatch(batch);
  if (!b.ok()) return b.status();
  return (*b)->TaskStatusAt(task);
}

absl::StatusOr<BatchStatus> TransferEngine::GetBatchStatus(BatchId batch) const {
  auto b = impl_->FindBatch(batch);
  if (!b.ok()) return b.status();
  return (*b)->Status();
}

absl::StatusOr<BatchStatus> TransferEngine::Wait(BatchId batch, Clock::time_point deadline) const {
  auto b = impl_->FindBatch(batch);
  if (!b.ok()) return b.status();
  return (*b)->Wait(deadline);
}

absl::Status TransferEngine::FreeBatch(BatchId batch) {
  auto b = impl_->FindBatch(batch);
  if (!b.ok()) return b.status();
  if (auto st = (*b)->MarkFreed(); !st.ok()) return st;
  common::MutexLock lock(&impl_->mu);
  impl_->batches.erase(static_cast<uint64_t>(batch));
  return absl::OkStatus();
}

std::vector<std::string> TransferEngine::Transports() const {
  std::vector<std::string> out;
  for (const TransportPtr& t : impl_->transports) out.emplace_back(t->Name());
  return out;
}

std::vector<std::pair<std::string, std::string>> TransferEngine::UnavailableTransports() const {
  return impl_->unavailable;
}

void TransferEngine::CollectMetrics(MetricsSink& sink) const {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  for (const TransportPtr& t : impl_->transports) {
    const TransportStats& s = t->Stats();
    sink.Counter("kvgate_transfer_bytes_total", "Bytes moved", t->Name(), "read",
                 s.read_bytes.load(kRelaxed));
    sink.Counter("kvgate_transfer_bytes_total", "Bytes moved", t->Name(), "write",
                 s.write_bytes.load(kRelaxed));
    sink.Counter("kvgate_transfer_requests_total", "Requests taken", t->Name(), "read",
                 s.reads.load(kRelaxed));
    sink.Counter("kvgate_transfer_requests_total", "Requests taken", t->Name(), "write",
                 s.writes.load(kRelaxed));
    sink.Counter("kvgate_transfer_failures_total", "Failed or timed-out requests and slices",
                 t->Name(), "", s.failures.load(kRelaxed));
    sink.Counter("kvgate_transfer_retries_total", "Slices retried on a new connection", t->Name(),
                 "", s.retries.load(kRelaxed));
    sink.Counter("kvgate_transfer_auth_failures_total",
                 "Peers refused for not proving a store credential", t->Name(), "",
                 s.auth_failures.load(kRelaxed));
    sink.Counter("kvgate_transfer_capability_denied_total",
                 "Requests refused for a missing, forged, expired or too narrow capability",
                 t->Name(), "", s.capability_denied.load(kRelaxed));
  }
}

}  // namespace kvgate::transfer
