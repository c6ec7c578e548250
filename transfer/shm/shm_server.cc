#include "transfer/shm/shm_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "common/mutex.h"
#include "spdlog/spdlog.h"
#include "transfer/memory_registry.h"
#include "transfer/shm/unix_socket.h"

namespace kvgate::transfer::shm_internal {

absl::StatusOr<std::unique_ptr<ShmServer>> ShmServer::Start(std::string name,
                                                            const MemoryRegistry* registry) {
  auto fd = ListenAbstract(name);
  if (!fd.ok()) return fd.status();
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(*fd);
    return absl::ResourceExhaustedError("shm: eventfd failed");
  }
  return std::unique_ptr<ShmServer>(new ShmServer(std::move(name), registry, *fd, wake));
}

ShmServer::ShmServer(std::string name, const MemoryRegistry* registry, int listen_fd, int wake_fd)
    : name_(std::move(name)), registry_(registry), listen_fd_(listen_fd), wake_fd_(wake_fd) {
  thread_ = std::thread([this] { Loop(); });
}

ShmServer::~ShmServer() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  common::MutexLock lock(&mu_);
  for (int c : clients_) close(c);
  clients_.clear();
  close(listen_fd_);
  close(wake_fd_);
}

void ShmServer::DropLocked(int client) {
  auto it = std::find(clients_.begin(), clients_.end(), client);
  if (it != clients_.end()) {
    clients_.erase(it);
    AckLocked(client, 0);  // A peer that is gone maps nothing any more.
    close(client);
  }
}

void ShmServer::AckLocked(int client, uint64_t seq) {
  for (auto& [n, waiting] : pending_) {
    if (seq != 0 && n != seq) continue;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), client), waiting.end());
  }
  acked_.SignalAll();
}

void ShmServer::Revoke(uint64_t id, std::chrono::milliseconds timeout) {
  ShmMessage msg;
  msg.op = ShmOp::kRevoke;
  msg.id = id;
  common::MutexLock lock(&mu_);
  msg.seq = next_revoke_++;
  std::vector<int> waiting;
  for (int c : clients_) {
    // Only the server thread closes client sockets (so their numbers are never reused under
    // its poll); a shutdown makes it see a hang-up and drop this one.
    if (SendMessage(c, msg).ok()) {
      waiting.push_back(c);
    } else {
      shutdown(c, SHUT_RDWR);
    }
  }
  if (waiting.empty()) return;
  pending_.emplace_back(msg.seq, std::move(waiting));
  auto mine = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::find_if(pending_.begin(), pending_.end(),
                        [&](const auto& p) { return p.first == msg.seq; });
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!mine()->second.empty()) {
    if (acked_.WaitUntil(&mu_, deadline)) {
      spdlog::warn("shm: {} peer(s) of @{} did not confirm unmapping buffer {} within {} ms",
                   mine()->second.size(), name_, id, timeout.count());
      break;
    }
  }
  pending_.erase(mine());
}

void ShmServer::Serve(int client) {
  ShmMessage req;
  int fd = -1;
  absl::Status st = ReceiveMessage(client, &req, &fd);
  if (fd >= 0) close(fd);  // Peers never send descriptors.
  common::MutexLock lock(&mu_);
  if (st.ok() && req.op == ShmOp::kRevokeAck) {
    AckLocked(client, req.seq);
    return;
  }
  if (!st.ok() || req.op != ShmOp::kGet) {
    DropLocked(client);
    return;
  }
  ShmMessage reply;
  reply.op = ShmOp::kReply;
  reply.seq = req.seq;
  int send_fd = -1;
  LocalBufferPtr buf = registry_->Find(req.addr, 1);
  if (buf == nullptr) {
    reply.status = ShmStatus::kNotFound;
  } else if (!buf->managed()) {
    reply.status = ShmStatus::kNotShareable;
  } else {
    reply.addr = buf->addr;
    reply.length = buf->length;
    reply.id = buf->id;
    send_fd = buf->memfd;
  }
  // The kernel duplicates the descriptor into the peer; `buf` keeps ours open until then.
  if (!SendMessage(client, reply, send_fd).ok()) DropLocked(client);
}

void ShmServer::Loop() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    {
      common::MutexLock lock(&mu_);
      if (stop_) return;
      for (int c : clients_) fds.push_back({c, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[1].revents != 0) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof(v));
      continue;
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents & POLLIN) {
        Serve(fds[i].fd);
      } else if (fds[i].revents != 0) {
        common::MutexLock lock(&mu_);
        DropLocked(fds[i].fd);
      }
    }
    if (fds[0].revents & POLLIN) {
      const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        // An abstract socket has no file mode: anyone on the host can connect, and a peer that
        // is served gets a read-write mapping of the pool. Only this user (and root, who could
        // read the memory anyway) may.
        ucred cred{};
        socklen_t len = sizeof(cred);
        const bool known = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
        common::MutexLock lock(&mu_);
        if (!known || (cred.uid != geteuid() && cred.uid != 0) || clients_.size() >= kMaxClients) {
          ++refused_;
          if (refused_ == 1 || refused_ % 1000 == 0)
            spdlog::warn(
                "shm: @{}: refused a peer (uid {}, {} refused so far): only uid {} may map "
                "this pool",
                name_, known ? static_cast<int64_t>(cred.uid) : -1, refused_, geteuid());
          close(c);
        } else {
          clients_.push_back(c);
        }
      } else {
        spdlog::debug("shm: accept on @{} failed", name_);
      }
    }
  }
}

}  // namespace kvgate::transfer::shm_internal
