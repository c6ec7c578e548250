#include "transfer/rdma/rdma_transport.h"

#if !defined(KVGATE_WITH_RDMA)

namespace kvgate::transfer {

absl::StatusOr<TransportPtr> CreateRdmaTransport(const RdmaParams&) {
  return absl::UnavailableError("no RDMA device: built without libibverbs (KVGATE_WITH_RDMA=OFF)");
}

}  // namespace kvgate::transfer

#else

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "common/strings.h"
#include "common/url.h"
#include "spdlog/spdlog.h"
#include "transfer/gpu/gpu_runtime.h"
#include "transfer/memory_registry.h"
#include "transfer/rdma/rdma_context.h"
#include "transfer/sync.h"
#include "transfer/task.h"

namespace kvgate::transfer {
namespace {

using namespace rdma_internal;  // NOLINT: this transport's own plumbing.

// --- Blocking socket helpers for the handshake (control plane only). ---

bool WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, std::max<int>(0, static_cast<int>(left.count())));
    if (r > 0) return (p.revents & (POLLERR | POLLNVAL)) == 0;
    if (r == 0 || errno != EINTR) return false;
  }
}

bool ReadExact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (!WaitFd(fd, POLLIN, deadline)) return false;
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteExact(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    if (!WaitFd(fd, POLLOUT, deadline)) return false;
    const ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

absl::StatusOr<int> ConnectTcp(const std::string& host, uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return absl::UnavailableError(common::StrCat("cannot resolve ", host));
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  const int err = errno;
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError("socket failed");
  if (rc != 0 && (err != EINPROGRESS || !WaitFd(fd, POLLOUT, deadline))) {
    close(fd);
    return absl::UnavailableError(common::StrCat("connect to ", host, ":", port, " failed"));
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
  if (so_error != 0) {
    close(fd);
    return absl::UnavailableError(
        common::StrCat("connect to ", host, ":", port, ": ", std::strerror(so_error)));
  }
  return fd;
}

uint32_t RandomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xFFFFFF;
}

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
  Mutex mu;
  std::vector<QpState> qps ABSL_GUARDED_BY(mu);
  uint32_t next_qp ABSL_GUARDED_BY(mu) = 0;
  std::atomic<bool> broken{false};

  ~Endpoint() {
    MutexLock lock(&mu);
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

// An owner-side QP set, alive while its client keeps the handshake socket open.
struct ServedClient {
  int fd = -1;
  std::vector<ibv_qp*> qps;
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
    Mutex mu;
    CondVar cv;
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
  void ServeHandshakes();
  void Accept();

  const RdmaParams params_;
  TransportContext context_;
  TransportStats stats_;
  std::vector<std::unique_ptr<RdmaDevice> > devices_;
  std::vector<Poller> pollers_;
  std::atomic<bool> stop_{false};

  mutable Mutex mr_mu_;
  absl::btree_map<uint64_t, MrEntry> mrs_ ABSL_GUARDED_BY(mr_mu_);  // By buffer address.

  Mutex ep_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Endpoint> > endpoints_ ABSL_GUARDED_BY(ep_mu_);
  uint64_t next_pair_ ABSL_GUARDED_BY(ep_mu_) = 0;

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::string endpoint_;
  std::vector<ServedClient> served_;  // Handshake thread only.
  std::thread handshake_thread_;
};

RdmaTransport::~RdmaTransport() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (handshake_thread_.joinable()) handshake_thread_.join();
  for (ServedClient& c : served_) {
    for (ibv_qp* qp : c.qps) ibv_destroy_qp(qp);
    close(c.fd);
  }
  {
    std::vector<std::shared_ptr<Endpoint> > eps;
    {
      MutexLock lock(&ep_mu_);
      for (auto& [key, ep] : endpoints_) eps.push_back(ep);
      endpoints_.clear();
    }
    for (auto& ep : eps) {
      std::vector<RdmaSlice*> unposted;
      {
        MutexLock ep_lock(&ep->mu);
        unposted = BreakEndpointLocked(*ep);  // Posted work flushes; the pollers fail it.
      }
      FailUnposted(std::move(unposted));
    }
  }
  // Let the pollers drain the flushes, then stop them.
  for (Poller& p : pollers_) {
    MutexLock lock(&p.mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (p.outstanding > 0 && !p.cv.WaitUntil(&p.mu, deadline)) {
    }
    p.cv.SignalAll();
  }
  for (Poller& p : pollers_) {
    {
      MutexLock lock(&p.mu);
      p.cv.SignalAll();
    }
    if (p.thread.joinable()) p.thread.join();
  }
  MutexLock lock(&mr_mu_);
  for (auto& [addr, e] : mrs_) {
    for (ibv_mr* mr : e.mrs) ibv_dereg_mr(mr);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::Status RdmaTransport::Start(const TransportContext& context) {
  context_ = context;
  // Handshake listener.
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(params_.handshake_port);
  if (inet_pton(AF_INET, params_.listen_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        common::StrCat("rdma: listen_address '", params_.listen_address, "' is not IPv4"));
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    return absl::UnavailableError(
        common::StrCat("rdma: cannot listen for handshakes: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string host = params_.advertise_host;
  if (host.empty()) {
    char name[256] = {};
    if (params_.listen_address == "0.0.0.0") {
      gethostname(name, sizeof(name) - 1);
      host = name;
    } else {
      host = params_.listen_address;
    }
  }
  endpoint_ = common::StrCat(host, ":", ntohs(addr.sin_port));
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  handshake_thread_ = std::thread([this] { ServeHandshakes(); });
  for (size_t i = 0; i < devices_.size(); ++i) {
    pollers_[i].thread = std::thread([this, i] { Poll(i); });
  }
  std::vector<std::string> names;
  for (const auto& d : devices_) names.push_back(d->name);
  spdlog::info("transfer: rdma on {} (handshake {})", common::StrJoin(names, ", "), endpoint_);
  return absl::OkStatus();
}

void RdmaTransport::Describe(SegmentDescriptor& desc) const {
  desc.rdma_endpoint = endpoint_;
  desc.rdma_devices.clear();
  for (const auto& d : devices_) {
    desc.rdma_devices.push_back({d->name, d->lid, GidToHex(d->gid)});
  }
  MutexLock lock(&mr_mu_);
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
  MutexLock lock(&mr_mu_);
  mrs_[buffer.addr] = std::move(entry);
  return absl::OkStatus();
}

void RdmaTransport::UnregisterBuffer(const LocalBuffer& buffer) {
  MrEntry entry;
  {
    MutexLock lock(&mr_mu_);
    auto it = mrs_.find(buffer.addr);
    if (it == mrs_.end()) return;
    entry = std::move(it->second);
    mrs_.erase(it);
  }
  // Deregistering revokes the rkeys: a peer still using them gets a remote access error.
  for (ibv_mr* mr : entry.mrs) ibv_dereg_mr(mr);
}

std::vector<uint32_t> RdmaTransport::LocalKeys(uint64_t addr, uint64_t length) const {
  MutexLock lock(&mr_mu_);
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
  auto hp = common::ParseHostPort(peer.rdma_endpoint);
  if (!hp.ok())
    return absl::UnavailableError(common::StrCat("rdma: bad endpoint ", peer.rdma_endpoint));
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
    MutexLock lock(&ep->mu);
    for (uint32_t i = 0; i < n; ++i) {
      auto qp = CreateQp(dev, params_.max_outstanding_wr);
      if (!qp.ok()) return qp.status();
      ep->qps.push_back({*qp, {}, {}});
      hello.qpn[i] = (*qp)->qp_num;
    }
  }
  auto fd = ConnectTcp(hp->first, hp->second, deadline);
  if (!fd.ok()) return fd.status();
  ep->handshake_fd = *fd;
  RdmaHelloReply reply;
  if (!WriteExact(*fd, &hello, sizeof(hello), deadline) ||
      !ReadExact(*fd, &reply, sizeof(reply), deadline) || reply.magic != kRdmaHelloMagic ||
      reply.status != 0 || reply.qp_count != n) {
    return absl::UnavailableError(common::StrCat("rdma: handshake with segment '", peer.name, "' (",
                                                 peer.rdma_endpoint, ") failed"));
  }
  QpEndpointInfo local{0, hello.psn, dev.lid, dev.gid, dev.mtu};
  QpEndpointInfo remote;
  remote.psn = reply.psn;
  remote.lid = static_cast<uint16_t>(reply.lid);
  std::memcpy(remote.gid.raw, reply.gid, 16);
  remote.mtu = static_cast<ibv_mtu>(reply.mtu);
  MutexLock lock(&ep->mu);
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
    MutexLock lock(&ep_mu_);
    auto it = endpoints_.find(key);
    if (it != endpoints_.end() && !it->second->broken.load()) return it->second;
  }
  // Lazily, on first use (and again after an error): one handshake round trip.
  auto ep = Connect(peer, local_dev, remote_dev);
  if (!ep.ok()) return ep.status();
  MutexLock lock(&ep_mu_);
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
    MutexLock lock(&pollers_[dev].mu);
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
    MutexLock lock(&ep_mu_);
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
      MutexLock lock(&pollers_[dev_index].mu);
      pollers_[dev_index].outstanding += static_cast<int>(per_ep[p].size());
      pollers_[dev_index].cv.SignalAll();
    }
    std::vector<RdmaSlice*> failed;
    {
      MutexLock lock(&ep.mu);
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
    MutexLock lock(&ep_mu_);
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
      MutexLock lock(&ep->mu);
      unposted = BreakEndpointLocked(*ep);
    }
    FailUnposted(std::move(unposted));
  }
}

void RdmaTransport::ScanDeadlines(size_t dev_index) {
  std::vector<std::shared_ptr<Endpoint> > eps;
  {
    MutexLock lock(&ep_mu_);
    for (auto& [key, ep] : endpoints_) {
      if (ep->dev_index == dev_index) eps.push_back(ep);
    }
  }
  const auto now = Clock::now();
  std::vector<RdmaSlice*> expired;
  for (auto& ep : eps) {
    MutexLock lock(&ep->mu);
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
      MutexLock lock(&me.mu);
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
        MutexLock lock(&ep.mu);
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
      MutexLock lock(&me.mu);
      if (--me.outstanding == 0) me.cv.SignalAll();
    }
    if (n <= 0) std::this_thread::yield();
    if (now >= next_scan) {
      ScanDeadlines(dev_index);
      next_scan = now + std::chrono::milliseconds(10);
    }
  }
}

void RdmaTransport::Accept() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(params_.connect_timeout_ms);
  RdmaHello hello;
  RdmaHelloReply reply;
  ServedClient client;
  client.fd = fd;
  if (!ReadExact(fd, &hello, sizeof(hello), deadline) || hello.magic != kRdmaHelloMagic) {
    close(fd);
    return;
  }
  hello.instance[sizeof(hello.instance) - 1] = '\0';
  if (context_.instance != hello.instance) {
    reply.status = 1;
  } else if (hello.remote_device >= devices_.size() || hello.qp_count == 0 ||
             hello.qp_count > kMaxQpsPerEndpoint) {
    reply.status = 2;
  } else {
    RdmaDevice& dev = *devices_[hello.remote_device];
    QpEndpointInfo local{0, RandomPsn(), dev.lid, dev.gid, dev.mtu};
    QpEndpointInfo remote;
    remote.psn = hello.psn;
    remote.lid = static_cast<uint16_t>(hello.lid);
    std::memcpy(remote.gid.raw, hello.gid, 16);
    remote.mtu = static_cast<ibv_mtu>(hello.mtu);
    reply.qp_count = hello.qp_count;
    reply.psn = local.psn;
    reply.lid = dev.lid;
    reply.mtu = dev.mtu;
    std::memcpy(reply.gid, dev.gid.raw, 16);
    for (uint32_t i = 0; i < hello.qp_count && reply.status == 0; ++i) {
      auto qp = CreateQp(dev, 16);  // Responder only: one-sided ops post nothing here.
      if (!qp.ok()) {
        reply.status = 3;
        break;
      }
      client.qps.push_back(*qp);
      local.qpn = (*qp)->qp_num;
      remote.qpn = hello.qpn[i];
      reply.qpn[i] = local.qpn;
      if (!ConnectQp(*qp, dev, local, remote, params_).ok()) reply.status = 3;
    }
  }
  if (!WriteExact(fd, &reply, sizeof(reply), deadline) || reply.status != 0) {
    for (ibv_qp* qp : client.qps) ibv_destroy_qp(qp);
    close(fd);
    return;
  }
  served_.push_back(std::move(client));
}

void RdmaTransport::ServeHandshakes() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const ServedClient& c : served_) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[1].revents != 0) continue;  // stop_
    // A client closing its handshake socket (exit, endpoint rebuilt) releases its QPs.
    for (size_t i = fds.size(); i-- > 2;) {
      if (fds[i].revents == 0) continue;
      char c;
      if (recv(fds[i].fd, &c, 1, MSG_DONTWAIT) > 0) continue;  // Clients send nothing more.
      ServedClient& sc = served_[i - 2];
      for (ibv_qp* qp : sc.qps) ibv_destroy_qp(qp);
      close(sc.fd);
      served_.erase(served_.begin() + static_cast<long>(i - 2));
    }
    if (fds[0].revents & POLLIN) Accept();
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
