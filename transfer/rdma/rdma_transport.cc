#include "transfer/rdma/rdma_transport.h"

#if !defined(KVGATE_WITH_RDMA)

namespace kvgate::transfer {

absl::StatusOr<TransportPtr> CreateRdmaTransport(const RdmaParams&) {
  return absl::UnavailableError("no RDMA device: built without libibverbs (KVGATE_WITH_RDMA=OFF)");
}

}  // namespace kvgate::transfer

#else

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "common/url.h"
#include "spdlog/spdlog.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/memory_registry.h"
#include "transfer/rdma/rdma_context.h"
#include "transfer/rdma/rdma_handshake.h"
#include "transfer/task.h"

namespace kvgate::transfer {
namespace {

using namespace rdma_internal;  // NOLINT: this transport's own plumbing.

// --- Data path state. ---

struct Endpoint;

struct RdmaSlice {
  Task* task = nullptr;
  TransferOp op = TransferOp::kRead;
  uint64_t local = 0;
  uint32_t lkey = 0;
  uint64_t remote = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  Clock::time_point deadline;
  std::shared_ptr<Endpoint> endpoint;  // Keeps QPs alive until the completion arrives.
  uint32_t qp_index = 0;
};

struct QpState {
  ibv_qp* qp = nullptr;
  std::deque<RdmaSlice*> posted;   // In post order: RC completes a QP's requests in order.
  std::deque<RdmaSlice*> backlog;  // Waiting for room (max_outstanding_wr).
};

// One (local NIC, remote NIC) pair with its QPs and the handshake socket that keeps the owner's
// side alive. `mu` guards the QP queues.
struct Endpoint {
  RdmaDevice* dev = nullptr;
  size_t dev_index = 0;  // Of dev in the transport's devices (and pollers).
  std::string segment;
  int handshake_fd = -1;
  common::Mutex mu;
  std::vector<QpState> qps ABSL_GUARDED_BY(mu);
  uint32_t next_qp ABSL_GUARDED_BY(mu) = 0;
  std::atomic<bool> broken{false};

  ~Endpoint() {
    common::MutexLock lock(&mu);
    for (QpState& q : qps) {
      if (q.qp != nullptr) ibv_destroy_qp(q.qp);
    }
    if (handshake_fd >= 0) close(handshake_fd);
  }
};

struct MrEntry {
  uint64_t length = 0;
  std::vector<ibv_mr*> mrs;  // One per device.
};

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(const RdmaParams& params, std::vector<std::unique_ptr<RdmaDevice> > devices)
      : params_(params), devices_(std::move(devices)), pollers_(devices_.size()) {}
  ~RdmaTransport() override;

  // transfer::Transport
  std::string_view Name() const override { return "rdma"; }
  Capabilities GetCapabilities() const override {
    Capabilities c;
    c.local_device_memory = true;  // With dma-buf MRs (GPUDirect).
    c.remote_device_memory = true;
    c.zero_copy = true;
    c.max_slice_bytes = params_.slice_bytes;
    return c;
  }
  absl::Status Start(const TransportContext& context) override;
  void Describe(SegmentDescriptor& desc) const override;
  absl::Status RegisterBuffer(const LocalBuffer& buffer) override;
  void UnregisterBuffer(const LocalBuffer& buffer) override;
  bool CanReach(const SegmentDescriptor& peer) const override {
    return !peer.rdma_endpoint.empty() && !peer.rdma_devices.empty();
  }
  bool CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const override {
    return task.remote_buffer != nullptr &&
           task.remote_buffer->rkeys.size() == peer.rdma_devices.size() &&
           !LocalKeys(reinterpret_cast<uint64_t>(task.local), task.length).empty();
  }
  absl::Status Submit(const SegmentDescriptorPtr& peer,
                      absl::Span<const TransferTask> tasks) override;
  void ForgetPeer(const SegmentDescriptor& peer) override;
  const TransportStats& Stats() const override { return stats_; }

 private:
  struct Poller {
    common::Mutex mu;
    common::CondVar cv;
    int outstanding ABSL_GUARDED_BY(mu) = 0;
    std::thread thread;
  };

  std::vector<uint32_t> LocalKeys(uint64_t addr, uint64_t length) const;
  absl::StatusOr<std::shared_ptr<Endpoint> > GetEndpoint(const SegmentDescriptor& peer,
                                                         size_t local_dev, size_t remote_dev);
  absl::StatusOr<std::shared_ptr<Endpoint> > Connect(const SegmentDescriptor& peer,
                                                     size_t local_dev, size_t remote_dev);
  // Posts `s`, or queues it while the QP is full. On a broken endpoint (or a failed post) the
  // slice goes to `failed`, to be completed by the caller once ep.mu is released.
  void PostLocked(Endpoint& ep, QpState& q, RdmaSlice* s, std::vector<RdmaSlice*>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ep.mu);
  // Moves the QPs to ERR (posted work flushes back through the CQ) and hands back the backlog.
  std::vector<RdmaSlice*> BreakEndpointLocked(Endpoint& ep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ep.mu);
  // Completes slices that never reached the NIC (not under any endpoint lock: the last slice
  // may destroy its endpoint).
  void FailUnposted(std::vector<RdmaSlice*> slices);
  void Complete(RdmaSlice* s, absl::Status st);
  void Poll(size_t dev_index);
  void ScanDeadlines(size_t dev_index);

  const RdmaParams params_;
  TransportContext context_;
  TransportStats stats_;
  std::vector<std::unique_ptr<RdmaDevice> > devices_;
  std::vector<Poller> pollers_;
  std::atomic<bool> stop_{false};

  mutable common::Mutex mr_mu_;
  absl::btree_map<uint64_t, MrEntry> mrs_ ABSL_GUARDED_BY(mr_mu_);  // By buffer address.

  common::Mutex ep_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Endpoint> > endpoints_ ABSL_GUARDED_BY(ep_mu_);
  uint64_t next_pair_ ABSL_GUARDED_BY(ep_mu_) = 0;

  std::unique_ptr<HandshakeServer> handshake_;
};

RdmaTransport::~RdmaTransport() {
  stop_ = true;
  handshake_.reset();  // Peers' QPs on this side go first.
  {
    std::vector<std::shared_ptr<Endpoint> > eps;
    {
      common::MutexLock lock(&ep_mu_);
      for (auto& [key, ep] : endpoints_) eps.push_back(ep);
      endpoints_.clear();
    }
    for (auto& ep : eps) {
      std::vector<RdmaSlice*> unposted;
      {
        common::MutexLock ep_lock(&ep->mu);
        unposted = BreakEndpointLocked(*ep);  // Posted work flushes; the pollers fail it.
      }
      FailUnposted(std::move(unposted));
    }
  }
  // Let the pollers drain the flushes, then stop them.
  for (Poller& p : pollers_) {
    common::MutexLock lock(&p.mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (p.outstanding > 0 && !p.cv.WaitUntil(&p.mu, deadline)) {
    }
    p.cv.SignalAll();
  }
  for (Poller& p : pollers_) {
    {
      common::MutexLock lock(&p.mu);
      p.cv.SignalAll();
    }
    if (p.thread.joinable()) p.thread.join();
  }
  common::MutexLock lock(&mr_mu_);
  for (auto& [addr, e] : mrs_) {
    for (ibv_mr* mr : e.mrs) ibv_dereg_mr(mr);
  }
}

absl::Status RdmaTransport::Start(const TransportContext& context) {
  context_ = context;
  auto server = HandshakeServer::Start(params_, context.instance, &devices_, context.auth,
                                       context.segment_name);
  if (!server.ok()) return server.status();
  handshake_ = std::move(*server);
  for (size_t i = 0; i < devices_.size(); ++i) {
    pollers_[i].thread = std::thread([this, i] { Poll(i); });
  }
  std::vector<std::string> names;
  for (const auto& d : devices_) names.push_back(d->name);
  spdlog::info("transfer: rdma on {} (handshake {})", common::StrJoin(names, ", "),
               handshake_->endpoint());
  return absl::OkStatus();
}

void RdmaTransport::Describe(SegmentDescriptor& desc) const {
  desc.rdma_endpoint = handshake_->endpoint();
  desc.rdma_devices.clear();
  for (const auto& d : devices_) {
    desc.rdma_devices.push_back({d->name, d->lid, GidToHex(d->gid)});
  }
  common::MutexLock lock(&mr_mu_);
  for (BufferDesc& b : desc.buffers) {
    auto it = mrs_.find(b.addr);
    if (it == mrs_.end()) continue;
    for (ibv_mr* mr : it->second.mrs) b.rkeys.push_back(mr->rkey);
  }
}

absl::Status RdmaTransport::RegisterBuffer(const LocalBuffer& buffer) {
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  MrEntry entry;
  entry.length = buffer.length;
  GpuRuntime* rt = context_.RuntimeFor(buffer.location);
  DmaBufRegion dmabuf;
  if (rt != nullptr) {
    auto region = rt->ExportDmaBuf(buffer.data(), buffer.length);
    if (!region.ok()) {
      // No GPUDirect path: the buffer stays reachable over tcp (bounced), not over rdma.
      spdlog::info("transfer: rdma: {} buffer {:#x} not registered with the NICs: {}",
                   buffer.location.ToString(), buffer.addr, region.status().message());
      return absl::OkStatus();
    }
    dmabuf = *region;
  }
  for (const auto& dev : devices_) {
    ibv_mr* mr = rt == nullptr ? ibv_reg_mr(dev->pd, buffer.data(), buffer.length, kAccess)
                               : ibv_reg_dmabuf_mr(dev->pd, dmabuf.offset, buffer.length,
                                                   buffer.addr, dmabuf.fd, kAccess);
    if (mr == nullptr) {
      const int err = errno;
      for (ibv_mr* m : entry.mrs) ibv_dereg_mr(m);
      if (dmabuf.fd >= 0) close(dmabuf.fd);
      return absl::ResourceExhaustedError(
          fmt::format("rdma: registering {} bytes at {:#x} ({}) on {}: {}", buffer.length,
                      buffer.addr, buffer.location.ToString(), dev->name, std::strerror(err)));
    }
    entry.mrs.push_back(mr);
  }
  if (dmabuf.fd >= 0) close(dmabuf.fd);  // The MRs keep their own reference.
  common::MutexLock lock(&mr_mu_);
  mrs_[buffer.addr] = std::move(entry);
  return absl::OkStatus();
}

void RdmaTransport::UnregisterBuffer(const LocalBuffer& buffer) {
  MrEntry entry;
  {
    common::MutexLock lock(&mr_mu_);
    auto it = mrs_.find(buffer.addr);
    if (it == mrs_.end()) return;
    entry = std::move(it->second);
    mrs_.erase(it);
  }
  // Deregistering revokes the rkeys: a peer still using them gets a remote access error.
  for (ibv_mr* mr : entry.mrs) ibv_dereg_mr(mr);
}

std::vector<uint32_t> RdmaTransport::LocalKeys(uint64_t addr, uint64_t length) const {
  common::MutexLock lock(&mr_mu_);
  auto it = mrs_.upper_bound(addr);
  if (it == mrs_.begin()) return {};
  --it;
  if (addr - it->first > it->second.length || length > it->second.length - (addr - it->first)) {
    return {};
  }
  std::vector<uint32_t> keys;
  for (ibv_mr* mr : it->second.mrs) keys.push_back(mr->lkey);
  return keys;
}

absl::StatusOr<std::shared_ptr<Endpoint> > RdmaTransport::Connect(const SegmentDescriptor& peer,
                                                                  size_t local_dev,
                                                                  size_t remote_dev) {
  RdmaDevice& dev = *devices_[local_dev];
  const auto deadline = Clock::now() + std::chrono::milliseconds(params_.connect_timeout_ms);
  auto ep = std::make_shared<Endpoint>();
  ep->dev = &dev;
  ep->dev_index = local_dev;
  ep->segment = peer.name;
  const uint32_t n = std::clamp<uint32_t>(params_.qps_per_endpoint, 1, kMaxQpsPerEndpoint);
  RdmaHello hello;
  hello.remote_device = static_cast<uint32_t>(remote_dev);
  std::strncpy(hello.instance, peer.instance.c_str(), sizeof(hello.instance) - 1);
  hello.qp_count = n;
  hello.psn = RandomPsn();
  hello.lid = dev.lid;
  hello.mtu = dev.mtu;
  std::memcpy(hello.gid, dev.gid.raw, 16);
  {
    common::MutexLock lock(&ep->mu);
    for (uint32_t i = 0; i < n; ++i) {
      auto qp = CreateQp(dev, params_.max_outstanding_wr);
      if (!qp.ok()) return qp.status();
      ep->qps.push_back({*qp, {}, {}});
      hello.qpn[i] = (*qp)->qp_num;
    }
  }
  RdmaHelloReply reply;
  auto fd = ExchangeHello(peer.rdma_endpoint, hello, &reply, deadline, context_.auth, peer.name);
  if (!fd.ok() || reply.qp_count != n) {
    if (fd.ok()) close(*fd);
    return absl::UnavailableError(
        common::StrCat("rdma: handshake with segment '", peer.name,
                       "': ", fd.ok() ? "wrong QP count" : fd.status().message()));
  }
  ep->handshake_fd = *fd;
  QpEndpointInfo local{0, hello.psn, dev.lid, dev.gid, dev.mtu};
  QpEndpointInfo remote;
  remote.psn = reply.psn;
  remote.lid = static_cast<uint16_t>(reply.lid);
  std::memcpy(remote.gid.raw, reply.gid, 16);
  remote.mtu = static_cast<ibv_mtu>(reply.mtu);
  common::MutexLock lock(&ep->mu);
  for (uint32_t i = 0; i < n; ++i) {
    local.qpn = hello.qpn[i];
    remote.qpn = reply.qpn[i];
    if (auto st = ConnectQp(ep->qps[i].qp, dev, local, remote, params_); !st.ok()) return st;
  }
  return ep;
}

absl::StatusOr<std::shared_ptr<Endpoint> > RdmaTransport::GetEndpoint(const SegmentDescriptor& peer,
                                                                      size_t local_dev,
                                                                      size_t remote_dev) {
  const std::string key = common::StrCat(peer.instance, "/", local_dev, "/", remote_dev);
  {
    common::MutexLock lock(&ep_mu_);
    auto it = endpoints_.find(key);
    if (it != endpoints_.end() && !it->second->broken.load()) return it->second;
  }
  // Lazily, on first use (and again after an error): one handshake round trip.
  auto ep = Connect(peer, local_dev, remote_dev);
  if (!ep.ok()) return ep.status();
  common::MutexLock lock(&ep_mu_);
  auto& slot = endpoints_[key];
  // A concurrent first use may have connected too: keep one, so that every endpoint with work
  // is in the map the deadline scan walks.
  if (slot != nullptr && !slot->broken.load()) return slot;
  slot = *ep;
  return *ep;
}

void RdmaTransport::PostLocked(Endpoint& ep, QpState& q, RdmaSlice* s,
                               std::vector<RdmaSlice*>* failed) {
  if (ep.broken.load()) {
    failed->push_back(s);
    return;
  }
  if (q.posted.size() >= params_.max_outstanding_wr) {
    q.backlog.push_back(s);
    return;
  }
  ibv_sge sge{s->local, s->length, s->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = reinterpret_cast<uint64_t>(s);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = s->op == TransferOp::kRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = s->remote;
  wr.wr.rdma.rkey = s->rkey;
  if (ibv_post_send(q.qp, &wr, &bad) != 0) {
    failed->push_back(s);
    for (RdmaSlice* b : BreakEndpointLocked(ep)) failed->push_back(b);
    return;
  }
  q.posted.push_back(s);
}

std::vector<RdmaSlice*> RdmaTransport::BreakEndpointLocked(Endpoint& ep) {
  ep.broken = true;
  std::vector<RdmaSlice*> backlog;
  for (QpState& q : ep.qps) {
    ErrorQp(q.qp);
    backlog.insert(backlog.end(), q.backlog.begin(), q.backlog.end());
    q.backlog.clear();
  }
  return backlog;
}

void RdmaTransport::FailUnposted(std::vector<RdmaSlice*> slices) {
  const auto now = Clock::now();
  for (RdmaSlice* s : slices) {
    const size_t dev = s->endpoint->dev_index;
    const bool late = s->deadline <= now;
    Complete(s, late ? absl::DeadlineExceededError("deadline passed")
                     : absl::UnavailableError("endpoint broken before the slice was posted"));
    common::MutexLock lock(&pollers_[dev].mu);
    if (--pollers_[dev].outstanding == 0) pollers_[dev].cv.SignalAll();
  }
}

void RdmaTransport::Complete(RdmaSlice* s, absl::Status st) {
  std::unique_ptr<RdmaSlice> owned(s);
  if (st.ok()) {
    stats_.CountBytes(s->op, s->length);
    s->task->SliceDone(s->length);
  } else {
    stats_.failures.fetch_add(1, std::memory_order_relaxed);
    s->task->SliceFailed(absl::Status(
        st.code(),
        fmt::format("rdma: {} of {} bytes at offset {:#x} of segment '{}': {}", OpName(s->op),
                    s->length, s->remote, s->endpoint->segment, st.message())));
  }
}

absl::Status RdmaTransport::Submit(const SegmentDescriptorPtr& peer,
                                   absl::Span<const TransferTask> tasks) {
  const size_t nl = devices_.size();
  const size_t nr = peer->rdma_devices.size();
  // Endpoints first, so a failed handshake leaves every task unstarted (tcp takes them).
  size_t first_pair = 0;
  {
    common::MutexLock lock(&ep_mu_);
    first_pair = next_pair_++;
  }
  const size_t pairs = std::max(nl, nr);
  std::vector<std::shared_ptr<Endpoint> > eps(pairs);
  for (size_t p = 0; p < pairs; ++p) {
    auto ep = GetEndpoint(*peer, (first_pair + p) % nl, (first_pair + p) % nr);
    if (!ep.ok()) return ep.status();
    eps[p] = std::move(*ep);
  }
  std::vector<std::vector<RdmaSlice*> > per_ep(pairs);
  size_t k = 0;
  for (const TransferTask& t : tasks) {
    stats_.CountRequest(t.op);
    const auto lkeys = LocalKeys(reinterpret_cast<uint64_t>(t.local), t.length);
    const uint64_t slice = params_.slice_bytes;
    t.task->Begin(static_cast<uint32_t>((t.length + slice - 1) / slice));
    for (uint64_t off = 0; off < t.length; off += slice, ++k) {
      const size_t p = k % pairs;
      auto* s = new RdmaSlice;
      s->task = t.task;
      s->op = t.op;
      s->local = reinterpret_cast<uint64_t>(t.local) + off;
      s->lkey = lkeys[(first_pair + p) % nl];
      s->remote = t.remote_addr + off;
      s->rkey = t.remote_buffer->rkeys[(first_pair + p) % nr];
      s->length = static_cast<uint32_t>(std::min(slice, t.length - off));
      s->deadline = t.deadline;
      s->endpoint = eps[p];
      per_ep[p].push_back(s);
    }
  }
  for (size_t p = 0; p < pairs; ++p) {
    if (per_ep[p].empty()) continue;
    Endpoint& ep = *eps[p];
    const size_t dev_index = ep.dev_index;
    {
      common::MutexLock lock(&pollers_[dev_index].mu);
      pollers_[dev_index].outstanding += static_cast<int>(per_ep[p].size());
      pollers_[dev_index].cv.SignalAll();
    }
    std::vector<RdmaSlice*> failed;
    {
      common::MutexLock lock(&ep.mu);
      for (RdmaSlice* s : per_ep[p]) {
        s->qp_index = ep.next_qp++ % static_cast<uint32_t>(ep.qps.size());
        PostLocked(ep, ep.qps[s->qp_index], s, &failed);
      }
    }
    FailUnposted(std::move(failed));
  }
  return absl::OkStatus();
}

void RdmaTransport::ForgetPeer(const SegmentDescriptor& peer) {
  std::vector<std::shared_ptr<Endpoint> > gone;
  {
    common::MutexLock lock(&ep_mu_);
    for (auto it = endpoints_.begin(); it != endpoints_.end();) {
      if (it->first.rfind(peer.instance + "/", 0) == 0) {
        gone.push_back(std::move(it->second));
        endpoints_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& ep : gone) {
    std::vector<RdmaSlice*> unposted;
    {
      common::MutexLock lock(&ep->mu);
      unposted = BreakEndpointLocked(*ep);
    }
    FailUnposted(std::move(unposted));
  }
}

void RdmaTransport::ScanDeadlines(size_t dev_index) {
  std::vector<std::shared_ptr<Endpoint> > eps;
  {
    common::MutexLock lock(&ep_mu_);
    for (auto& [key, ep] : endpoints_) {
      if (ep->dev_index == dev_index) eps.push_back(ep);
    }
  }
  const auto now = Clock::now();
  std::vector<RdmaSlice*> expired;
  for (auto& ep : eps) {
    common::MutexLock lock(&ep->mu);
    bool stuck = false;
    for (QpState& q : ep->qps) {
      for (auto it = q.backlog.begin(); it != q.backlog.end();) {
        if ((*it)->deadline <= now) {
          expired.push_back(*it);
          it = q.backlog.erase(it);
        } else {
          ++it;
        }
      }
      if (!q.posted.empty() && q.posted.front()->deadline <= now) stuck = true;
    }
    // Posted work cannot be recalled: an error state flushes it back through the CQ.
    if (stuck) {
      for (RdmaSlice* b : BreakEndpointLocked(*ep)) expired.push_back(b);
    }
  }
  eps.clear();
  FailUnposted(std::move(expired));
}

void RdmaTransport::Poll(size_t dev_index) {
  RdmaDevice& dev = *devices_[dev_index];
  Poller& me = pollers_[dev_index];
  ibv_wc wc[64];
  auto next_scan = Clock::now();
  for (;;) {
    {
      common::MutexLock lock(&me.mu);
      while (me.outstanding == 0 && !stop_.load()) me.cv.WaitFor(&me.mu, std::chrono::seconds(1));
      if (me.outstanding == 0 && stop_.load()) return;
    }
    const int n = ibv_poll_cq(dev.cq, 64, wc);
    const auto now = Clock::now();
    for (int i = 0; i < n; ++i) {
      auto* s = reinterpret_cast<RdmaSlice*>(wc[i].wr_id);
      Endpoint& ep = *s->endpoint;
      std::vector<RdmaSlice*> failed;
      {
        common::MutexLock lock(&ep.mu);
        QpState& q = ep.qps[s->qp_index];
        if (!q.posted.empty() && q.posted.front() == s) q.posted.pop_front();
        if (wc[i].status != IBV_WC_SUCCESS && !ep.broken.load()) {
          failed = BreakEndpointLocked(ep);
        }
        while (!q.backlog.empty() && q.posted.size() < params_.max_outstanding_wr &&
               !ep.broken.load()) {
          RdmaSlice* next = q.backlog.front();
          q.backlog.pop_front();
          PostLocked(ep, q, next, &failed);
        }
      }
      FailUnposted(std::move(failed));
      absl::Status st;
      if (wc[i].status != IBV_WC_SUCCESS) {
        st = s->deadline <= now ? absl::DeadlineExceededError("deadline passed")
                                : absl::UnavailableError(ibv_wc_status_str(wc[i].status));
      }
      Complete(s, std::move(st));
      common::MutexLock lock(&me.mu);
      if (--me.outstanding == 0) me.cv.SignalAll();
    }
    if (n <= 0) std::this_thread::yield();
    if (now >= next_scan) {
      ScanDeadlines(dev_index);
      next_scan = now + std::chrono::milliseconds(10);
    }
  }
}

}  // namespace

absl::StatusOr<TransportPtr> CreateRdmaTransport(const RdmaParams& params) {
  auto devices = OpenDevices(params);
  if (!devices.ok()) return devices.status();
  return TransportPtr(std::make_unique<RdmaTransport>(params, std::move(*devices)));
}

}  // namespace kvgate::transfer

#endif  // KVGATE_WITH_RDMA
