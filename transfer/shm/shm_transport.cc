#include "transfer/shm/shm_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "transfer/copy_pool.h"
#include "transfer/memory_registry.h"
#include "transfer/shm/shm_server.h"
#include "transfer/shm/unix_socket.h"
#include "transfer/task.h"

namespace kvgate::transfer {
namespace {

using shm_internal::ShmMessage;
using shm_internal::ShmOp;
using shm_internal::ShmStatus;

// A peer buffer mapped here. Copies hold a reference, so a revoke never unmaps under them.
struct Mapping {
  uint8_t* base = nullptr;
  uint64_t length = 0;
  uint64_t remote_addr = 0;
  ~Mapping() {
    if (base != nullptr) munmap(base, length);
  }
};

// One connected owner. The monitor thread is the only reader of `fd`; requesters write GETs
// and wait for the monitor to hand them the reply.
class ShmPeer {
 public:
  ShmPeer(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~ShmPeer() { close(fd_); }
  int fd() const { return fd_; }

  absl::StatusOr<std::shared_ptr<const Mapping>> MappingFor(const BufferDesc& b,
                                                            std::chrono::milliseconds timeout);
  // Monitor thread.
  void OnMessage(const ShmMessage& msg, int fd);
  void MarkDead() {
    common::MutexLock lock(&mu_);
    dead_ = true;
    cv_.SignalAll();
  }
  bool dead() const {
    common::MutexLock lock(&mu_);
    return dead_;
  }

 private:
  struct Waiter {
    bool done = false;
    ShmMessage reply;
    int fd = -1;
  };

  const int fd_;
  const std::string name_;
  mutable common::Mutex mu_;
  common::CondVar cv_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const Mapping>> maps_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::shared_ptr<const Mapping>> ShmPeer::MappingFor(
    const BufferDesc& b, std::chrono::milliseconds timeout) {
  Waiter waiter;
  ShmMessage req;
  {
    common::MutexLock lock(&mu_);
    if (dead_) return absl::UnavailableError(common::StrCat("shm: segment '", name_, "' is gone"));
    if (auto it = maps_.find(b.id); it != maps_.end()) return it->second;
    req.seq = next_seq_++;
    waiters_[req.seq] = &waiter;
  }
  req.op = ShmOp::kGet;
  req.addr = b.addr;
  absl::Status sent = shm_internal::SendMessage(fd_, req);
  {
    common::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (sent.ok() && !waiter.done && !dead_) {
      if (cv_.WaitUntil(&mu_, deadline)) break;
    }
    waiters_.erase(req.seq);
  }
  if (!waiter.done) {
    return absl::UnavailableError(common::StrCat("shm: segment '", name_,
                                                 "' did not hand over buffer ", b.id,
                                                 sent.ok() ? "" : ": ", sent.message()));
  }
  const ShmMessage& r = waiter.reply;
  if (r.status != ShmStatus::kOk || r.id != b.id || r.addr != b.addr || r.length < b.length) {
    if (waiter.fd >= 0) close(waiter.fd);
    // Unregistered or re-registered since the descriptor was read: the engine re-reads it.
    return absl::UnavailableError(
        fmt::format("shm: segment '{}' no longer shares buffer {} at {:#x} (status {})", name_,
                    b.id, b.addr, static_cast<uint32_t>(r.status)));
  }
  void* p = mmap(nullptr, r.length, PROT_READ | PROT_WRITE, MAP_SHARED, waiter.fd, 0);
  const int map_errno = errno;
  close(waiter.fd);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(common::StrCat("shm: mapping ", r.length, " bytes of segment '",
                                                 name_, "': ", std::strerror(map_errno)));
  }
  auto m = std::make_shared<Mapping>();
  m->base = static_cast<uint8_t*>(p);
  m->length = r.length;
  m->remote_addr = r.addr;
  common::MutexLock lock(&mu_);
  auto [it, inserted] = maps_.emplace(b.id, m);  // A concurrent requester may have won.
  return it->second;
}

void ShmPeer::OnMessage(const ShmMessage& msg, int fd) {
  if (msg.op == ShmOp::kRevoke) {
    {
      common::MutexLock lock(&mu_);
      maps_.erase(msg.id);
    }
    if (fd >= 0) close(fd);
    // The owner waits for this before its unregister returns.
    ShmMessage ack;
    ack.op = ShmOp::kRevokeAck;
    ack.seq = msg.seq;
    ack.id = msg.id;
    (void)shm_internal::SendMessage(fd_, ack);  // A failure closes the socket: as good.
    return;
  }
  common::MutexLock lock(&mu_);
  if (msg.op == ShmOp::kReply) {
    auto it = waiters_.find(msg.seq);
    if (it != waiters_.end()) {
      it->second->done = true;
      it->second->reply = msg;
      it->second->fd = fd;
      fd = -1;
      cv_.SignalAll();
    }
  }
  if (fd >= 0) close(fd);  // Late reply, or a descriptor nobody asked for.
}

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const ShmParams& params) : params_(params) {}
  ~ShmTransport() override {
    if (monitor_.joinable()) {
      {
        common::MutexLock lock(&mu_);
        stop_ = true;
      }
      Wake();
      monitor_.join();
    }
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  // transfer::Transport
  std::string_view Name() const override { return "shm"; }
  Capabilities GetCapabilities() const override {
    Capabilities c;
    c.same_host_only = true;
    c.local_device_memory = true;  // Copied with the GPU runtime.
    c.zero_copy = true;
    return c;
  }
  absl::Status Start(const TransportContext& context) override;
  void Describe(SegmentDescriptor& desc) const override { desc.shm_socket = server_->name(); }
  void UnregisterBuffer(const LocalBuffer& buffer) override {
    if (buffer.managed()) server_->Revoke(buffer.id);
  }
  bool CanReach(const SegmentDescriptor& peer) const override {
    return !peer.shm_socket.empty() && peer.host_id == context_.host_id;
  }
  bool CanCarry(const SegmentDescriptor& peer, const TransferTask& task) const override {
    return task.remote_buffer != nullptr && task.remote_buffer->shm;
  }
  absl::Status Submit(const SegmentDescriptorPtr& peer,
                      absl::Span<const TransferTask> tasks) override;
  void ForgetPeer(const SegmentDescriptor& peer) override {
    {
      common::MutexLock lock(&mu_);
      peers_.erase(peer.instance);
    }
    Wake();
  }
  const TransportStats& Stats() const override { return stats_; }

 private:
  absl::StatusOr<std::shared_ptr<ShmPeer>> GetPeer(const SegmentDescriptor& desc);
  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  void Monitor();

  const ShmParams params_;
  TransportContext context_;
  TransportStats stats_;
  std::unique_ptr<shm_internal::ShmServer> server_;
  int wake_fd_ = -1;
  common::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ShmPeer>> peers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread monitor_;
};

absl::Status ShmTransport::Start(const TransportContext& context) {
  context_ = context;
  auto server = shm_internal::ShmServer::Start("kvgate-shm-" + context.instance, context.registry);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return absl::ResourceExhaustedError("shm: eventfd failed");
  monitor_ = std::thread([this] { Monitor(); });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShmPeer>> ShmTransport::GetPeer(const SegmentDescriptor& desc) {
  {
    common::MutexLock lock(&mu_);
    auto it = peers_.find(desc.instance);
    if (it != peers_.end() && !it->second->dead()) return it->second;
  }
  auto fd = shm_internal::ConnectAbstract(desc.shm_socket);
  if (!fd.ok()) {
    return absl::UnavailableError(
        common::StrCat("shm: segment '", desc.name, "': ", fd.status().message()));
  }
  auto peer = std::make_shared<ShmPeer>(*fd, desc.name);
  {
    common::MutexLock lock(&mu_);
    auto& slot = peers_[desc.instance];
    // Another thread may have connected meanwhile: keep one connection per peer (the monitor
    // only reads sockets in the map).
    if (slot != nullptr && !slot->dead()) return slot;
    slot = peer;
  }
  Wake();  // The monitor starts reading the new socket.
  return peer;
}

absl::Status ShmTransport::Submit(const SegmentDescriptorPtr& peer,
                                  absl::Span<const TransferTask> tasks) {
  auto p = GetPeer(*peer);
  if (!p.ok()) return p.status();
  // Map everything first: an error here leaves every task unstarted, for the next transport.
  std::vector<std::shared_ptr<const Mapping>> maps(tasks.size());
  const auto timeout = std::chrono::milliseconds(params_.connect_timeout_ms);
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto m = (*p)->MappingFor(*tasks[i].remote_buffer, timeout);
    if (!m.ok()) return m.status();
    maps[i] = std::move(*m);
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TransferTask& t = tasks[i];
    stats_.CountRequest(t.op);
    CopyEnd local{t.local, context_.RuntimeFor(t.local_location)};
    CopyEnd remote{maps[i]->base + (t.remote_addr - maps[i]->remote_addr), nullptr};
    if (t.op == TransferOp::kRead) {
      context_.copy_pool->Copy(t.task, t.op, local, remote, t.length, maps[i], &stats_, t.flow);
    } else {
      context_.copy_pool->Copy(t.task, t.op, remote, local, t.length, maps[i], &stats_, t.flow);
    }
  }
  return absl::OkStatus();
}

void ShmTransport::Monitor() {
  std::vector<std::shared_ptr<ShmPeer>> snapshot;
  std::vector<pollfd> fds;
  for (;;) {
    snapshot.clear();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    {
      common::MutexLock lock(&mu_);
      if (stop_) return;
      for (const auto& [instance, peer] : peers_) {
        if (peer->dead()) continue;
        snapshot.push_back(peer);
        fds.push_back({peer->fd(), POLLIN, 0});
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents != 0) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof(v));
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      ShmMessage msg;
      int fd = -1;
      if ((fds[i].revents & POLLIN) && shm_internal::ReceiveMessage(fds[i].fd, &msg, &fd).ok()) {
        snapshot[i - 1]->OnMessage(msg, fd);
        continue;
      }
      // The owner exited or dropped us: later requests reconnect (or fall back).
      snapshot[i - 1]->MarkDead();
    }
  }
}

}  // namespace

absl::StatusOr<TransportPtr> CreateShmTransport(const ShmParams& params) {
  return TransportPtr(std::make_unique<ShmTransport>(params));
}

}  // namespace kvgate::transfer
