#include "router/server/address_claim.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace kvgate::router {
namespace {

// The abstract socket's name for host:port ("\0kvgate-listen/127.0.0.1:8000").
sockaddr_un ClaimName(const std::string& host, uint16_t port, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = common::StrCat("kvgate-listen/", host, ":", port);
  const size_t n = std::min(name.size(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return addr;
}

// The pid of the process holding the claim at `addr`, 0 when it cannot be told.
pid_t ClaimHolder(const sockaddr_un& addr, socklen_t len) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  pid_t pid = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
    ucred cred{};
    socklen_t cl = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) pid = cred.pid;
  }
  ::close(fd);
  return pid;
}

// Binds host:port without SO_REUSEPORT and lets it go: fails when any socket listens there,
// including another program's SO_REUSEPORT group that our threads' sockets would join.
int ProbeBindErrno(const std::string& host, uint16_t port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(*v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    family = AF_INET6;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(*v6);
  } else {
    return EINVAL;
  }
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;  // a port left in TIME_WAIT by the previous kvgate is free
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int err = ::bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

absl::StatusOr<AddressClaim> AddressClaim::Claim(const std::string& host, uint16_t port) {
  socklen_t len = 0;
  const sockaddr_un name = ClaimName(host, port, &len);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        common::StrCat("cannot claim ", host, ":", port, ": ", std::strerror(errno)));
  }
  AddressClaim claim(fd);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&name), len) != 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      const pid_t other = ClaimHolder(name, len);
      return absl::UnavailableError(
          common::StrCat("cannot listen on ", host, ":", port, ": another kvgate",
                         other > 0 ? common::StrCat(" (pid ", other, ")") : std::string(),
                         " already listens there; stop it or choose another address"));
    }
    return absl::UnavailableError(
        common::StrCat("cannot claim ", host, ":", port, ": ", std::strerror(err)));
  }
  // Listening lets a second kvgate connect and learn this one's pid (SO_PEERCRED).
  ::listen(fd, 1);
  if (const int err = ProbeBindErrno(host, port); err != 0) {
    return absl::UnavailableError(
        common::StrCat("cannot listen on ", host, ":", port, ": ", std::strerror(err),
                       err == EADDRINUSE ? " (another process listens there)" : ""));
  }
  return claim;
}

AddressClaim& AddressClaim::operator=(AddressClaim&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

AddressClaim::~AddressClaim() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kvgate::router
