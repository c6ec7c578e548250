#include "transfer/shm/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace kvgate::transfer::shm_internal {
namespace {

absl::StatusOr<sockaddr_un> AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(common::StrCat("shm socket name '", name, "' is too long"));
  }
  addr.sun_path[0] = '\0';  // Abstract namespace: no file to clean up after a crash.
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

absl::Status Errno(std::string_view what, const std::string& name) {
  return absl::UnavailableError(
      common::StrCat("shm: ", what, " '@", name, "': ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<int> ListenAbstract(const std::string& name) {
  socklen_t len = 0;
  auto addr = AbstractAddress(name, &len);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", name);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), len) != 0 || listen(fd, 64) != 0) {
    auto st = Errno("bind/listen on", name);
    close(fd);
    return st;
  }
  return fd;
}

absl::StatusOr<int> ConnectAbstract(const std::string& name) {
  socklen_t len = 0;
  auto addr = AbstractAddress(name, &len);
  if (!addr.ok()) return addr.status();
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket for", name);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), len) != 0) {
    auto st = Errno("connect to", name);
    close(fd);
    return st;
  }
  return fd;
}

absl::Status SendMessage(int sock, const ShmMessage& msg, int fd) {
  iovec iov{const_cast<ShmMessage*>(&msg), sizeof(msg)};
  msghdr hdr{};
  hdr.msg_iov = &iov;
  hdr.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    hdr.msg_control = control;
    hdr.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&hdr);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &hdr, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof(msg))) return absl::OkStatus();
    if (n < 0 && errno == EINTR) continue;
    return absl::UnavailableError(
        common::StrCat("shm: sendmsg: ", n < 0 ? std::strerror(errno) : "short write"));
  }
}

absl::Status ReceiveMessage(int sock, ShmMessage* msg, int* fd) {
  *fd = -1;
  iovec iov{msg, sizeof(*msg)};
  msghdr hdr{};
  hdr.msg_iov = &iov;
  hdr.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  hdr.msg_control = control;
  hdr.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &hdr, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return absl::UnavailableError("shm: peer closed the socket");
  if (n < 0) return absl::UnavailableError(common::StrCat("shm: recvmsg: ", std::strerror(errno)));
  for (cmsghdr* c = CMSG_FIRSTHDR(&hdr); c != nullptr; c = CMSG_NXTHDR(&hdr, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      std::memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
  }
  if (n != static_cast<ssize_t>(sizeof(*msg)) || (hdr.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return absl::InvalidArgumentError("shm: malformed message");
  }
  return absl::OkStatus();
}

}  // namespace kvgate::transfer::shm_internal
