// File: store/data_node.cc
#include "store/data_node.h"

#include <sys/mman.h>

#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {

absl::StatusOr<std::unique_ptr<DataNode>> DataNode::Start(DataNodeOptions options) {
  if (options.name.empty()) return absl::InvalidArgumentError("store: a data node needs a name");
  auto master = MasterClient::Create(options.master, options.name, std::chrono::seconds(10),
                                     options.auth != nullptr ? options.auth->self : std::nullopt);
  if (!master.ok()) return master.status();
  std::shared_ptr<MasterClient> shared = std::move(*master);
  auto metadata = std::make_unique<MasterMetadata>(shared, /*publish=*/true);
  MasterMetadata* metadata_ptr = metadata.get();
  transfer::TransferEngineOptions eo;
  eo.segment_name = options.name;
  eo.metadata = std::move(metadata);
  eo.transports = options.transports;
  eo.tcp = options.tcp;
  // With authentication, the master signs each range it hands out for the client it hands it to,
  // and the transfer port serves nothing else (docs/store.md, "Authentication").
  eo.tcp.require_capabilities = options.auth != nullptr;
  eo.load_gpu_runtimes = false;
  eo.auth = options.auth;
  auto engine = transfer::TransferEngine::Create(std::move(eo));
  if (!engine.ok()) return engine.status();
  auto pool = (*engine)->AllocateManagedMemory(options.memory);
  if (!pool.ok()) return pool.status();
  // KV pools are large and long-lived: huge pages cut TLB misses on every copy, where the
  // kernel allows them for shared memory (shmem_enabled); a no-op otherwise.
  (void)::madvise(*pool, options.memory, MADV_HUGEPAGE);
  // Fault the pool in now rather than on the first WRITE of every page: a put then costs what
  // it costs in steady state (MADV_POPULATE_WRITE, Linux 5.14; else one touch per page).
  constexpr int kPopulateWrite = 23;
  if (::madvise(*pool, options.memory, kPopulateWrite) != 0) {
    auto* p = static_cast<volatile char*>(*pool);
    for (uint64_t i = 0; i < options.memory; i += 4096) p[i] = 0;
  }
  auto node = std::unique_ptr<DataNode>(
      new DataNode(std::move(options), shared, metadata_ptr, std::move(*engine), *pool));
  node->thread_ = std::thread([n = node.get()] { n->Run(); });
  return node;
}

DataNode::DataNode(DataNodeOptions options, std::shared_ptr<MasterClient> master,
                   MasterMetadata* metadata, std::unique_ptr<transfer::TransferEngine> engine,
                   void* pool)
    : options_(std::move(options)),
      master_(std::move(master)),
      metadata_(metadata),
      engine_(std::move(engine)),
      pool_(pool) {}

DataNode::~DataNode() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  (void)engine_->UnregisterMemory(pool_);
}

size_t DataNode::objects() const {
  common::MutexLock lock(&mu_);
  return objects_.size();
}

absl::Status DataNode::CorruptForTest(uint64_t addr) {
  if (addr < base() || addr >= base() + capacity())
    return absl::OutOfRangeError(common::StrCat("address ", addr, " is outside the pool"));
  auto* p = reinterpret_cast<volatile uint8_t*>(addr);
  *p = static_cast<uint8_t>(*p ^ 0x5a);
  return absl::OkStatus();
}

bool DataNode::Register() {
  RegisterNodeRequest req;
  req.node = options_.name;
  req.host_id = transfer::LocalHostId();
  req.base = base();
  req.capacity = options_.memory;
  {
    common::MutexLock lock(&mu_);
    for (const auto& [offset, o] : objects_) req.objects.push_back(o);
  }
  // The leader may be new: it needs this node's segment descriptor before clients ask for it.
  if (auto s = metadata_->Republish(); !s.ok()) {
    spdlog::warn("store: data node {}: publishing its segment: {}", options_.name, s.message());
    return false;
  }
  auto r = master_->Call<RegisterNodeResponse>(req);
  if (!r.ok()) {
    spdlog::warn("store: data node {}: registering: {}", options_.name, r.status().message());
    return false;
  }
  epoch_ = r->epoch;
  if (r->heartbeat_ms > 0) heartbeat_ = std::chrono::milliseconds(r->heartbeat_ms);
  spdlog::info("store: data node {} registered with {} ({} objects)", options_.name,
               master_->leader(), req.objects.size());
  return true;
}

void DataNode::Apply(const HeartbeatResponse& changes) {
  common::MutexLock lock(&mu_);
  // Removals first: an offset freed and reused since the last beat comes back as an addition.
  for (uint64_t offset : changes.removed) objects_.erase(offset);
  for (const NodeObject& o : changes.added) objects_[o.offset] = o;
}

void DataNode::Run() {
  for (;;) {
    if (!registered_) {
      registered_ = Register();
    } else {
      auto r = master_->Call<HeartbeatResponse>(HeartbeatRequest{options_.name, epoch_});
      if (r.ok()) {
        Apply(*r);
      } else if (absl::IsNotFound(r.status())) {
        // A new leader (failover), or the master dropped us after a pause: join again with
        // everything we hold.
        spdlog::warn("store: data node {}: {}; re-registering", options_.name,
                     r.status().message());
        registered_ = Register();
      } else {
        spdlog::warn("store: data node {}: heartbeat: {}", options_.name, r.status().message());
      }
    }
    common::MutexLock lock(&mu_);
    if (stop_) break;
    cv_.WaitFor(&mu_, registered_ ? heartbeat_ : std::chrono::milliseconds(100));
    if (stop_) break;
  }
}

}  // namespace kvgate::store
