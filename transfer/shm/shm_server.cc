#include "transfer/shm/shm_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

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
    MutexLock lock(&mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  MutexLock lock(&mu_);
  for (int c : clients_) close(c);
  clients_.clear();
  close(listen_fd_);
  close(wake_fd_);
}

void ShmServer::DropLocked(int client) {
  auto it = std::find(clients_.begin(), clients_.end(), client);
  if (it != clients_.end()) {
    clients_.erase(it);
    close(client);
  }
}

void ShmServer::Revoke(uint64_t id) {
  ShmMessage msg;
  msg.op = ShmOp::kRevoke;
  msg.id = id;
  MutexLock lock(&mu_);
  for (int c : clients_) {
    // Only the server thread closes client sockets (so their numbers are never reused under
    // its poll); a shutdown makes it see a hang-up and drop this one.
    if (!SendMessage(c, msg).ok()) shutdown(c, SHUT_RDWR);
  }
}

void ShmServer::Serve(int client) {
  ShmMessage req;
  int fd = -1;
  absl::Status st = ReceiveMessage(client, &req, &fd);
  if (fd >= 0) close(fd);  // Peers never send descriptors.
  MutexLock lock(&mu_);
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
      MutexLock lock(&mu_);
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
        MutexLock lock(&mu_);
        DropLocked(fds[i].fd);
      }
    }
    if (fds[0].revents & POLLIN) {
      const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        MutexLock lock(&mu_);
        clients_.push_back(c);
      } else {
        spdlog::debug("shm: accept on @{} failed", name_);
      }
    }
  }
}

}  // namespace kvgate::transfer::shm_internal
