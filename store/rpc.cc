// File: store/rpc.cc
// ListenTcp and the blocking client side; the server is store/rpc_server.cc.
#include "store/rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {
namespace {

// Every byte of `iov` or an error; EINTR-safe, partial writes resumed.
bool WriteAll(int fd, iovec* iov, int n) {
  while (n > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return true;
}

// 0: ok; 1: clean EOF before the first byte; -1: error or EOF mid-way.
int ReadAll(int fd, void* p, size_t n) {
  auto* out = static_cast<char*>(p);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::recv(fd, out + done, n - done, 0);
    if (r == 0) return done == 0 ? 1 : -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    done += static_cast<size_t>(r);
  }
  return 0;
}

bool SendFrame(int fd, Op op, uint64_t id, std::string_view body) {
  uint8_t header[kFrameHeaderSize];
  EncodeFrameHeader({static_cast<uint32_t>(body.size()), kProtocolVersion, op, id}, header);
  iovec iov[2] = {{header, sizeof(header)}, {const_cast<char*>(body.data()), body.size()}};
  return WriteAll(fd, iov, body.empty() ? 1 : 2);
}

void SetTimeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

absl::StatusOr<std::pair<int, uint16_t>> ListenTcp(const std::string& host, uint16_t port,
                                                   std::string_view what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return absl::UnavailableError(
        common::StrCat(what, ": cannot resolve ", host, ": ", gai_strerror(rc)));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok =
      fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
  ::freeaddrinfo(res);
  if (!ok) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        common::StrCat(what, ": cannot listen on ", host, ":", port, ": ", std::strerror(err)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const uint16_t bound =
      ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::make_pair(fd, bound);
}

RpcConnection::RpcConnection(std::string host, uint16_t port,
                             std::optional<transfer::Credential> self)
    : host_(std::move(host)),
      port_(port),
      address_(common::StrCat(host_, ":", port_)),
      self_(std::move(self)) {}

RpcConnection::~RpcConnection() {
  common::MutexLock lock(&mu_);
  CloseLocked();
}

void RpcConnection::CloseLocked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status RpcConnection::ConnectLocked(std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port_);
  if (int rc = ::getaddrinfo(host_.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return absl::UnavailableError(
        common::StrCat("store: cannot resolve ", host_, ": ", gai_strerror(rc)));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    int err = 0;
    socklen_t len = sizeof(err);
    if (rc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc == 0) err = ETIMEDOUT;
    rc = rc == 1 && err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        common::StrCat("store: cannot connect to ", address_, ": ", std::strerror(err)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (self_.has_value()) {
    SetTimeouts(fd, timeout);
    if (auto s = transfer::AuthenticateToServer(fd, *self_, "master"); !s.ok()) {
      ::close(fd);
      return absl::Status(s.code(), common::StrCat(s.message(), " (", address_, ")"));
    }
  }
  fd_ = fd;
  return absl::OkStatus();
}

absl::StatusOr<std::string> RpcConnection::Call(Op op, std::string_view body,
                                                std::chrono::milliseconds timeout) {
  common::MutexLock lock(&mu_);
  if (fd_ < 0) {
    if (auto s = ConnectLocked(timeout); !s.ok()) return s;
  }
  SetTimeouts(fd_, timeout);
  const uint64_t id = next_id_++;
  auto broken = [&](std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
    CloseLocked();
    std::string msg = common::StrCat("store: ", OpName(op), " to ", address_, ": ", what);
    return timed_out ? absl::DeadlineExceededError(msg) : absl::UnavailableError(msg);
  };
  if (!SendFrame(fd_, op, id, body)) return broken("send failed");
  uint8_t raw[kFrameHeaderSize];
  if (ReadAll(fd_, raw, sizeof(raw)) != 0) return broken("connection closed");
  auto header = DecodeFrameHeader(raw);
  if (!header.ok()) {
    CloseLocked();
    return header.status();
  }
  std::string reply(header->body_length, '\0');
  if (ReadAll(fd_, reply.data(), reply.size()) != 0) return broken("connection closed");
  if (header->request_id != id && header->request_id != 0) {
    CloseLocked();
    return absl::InternalError(common::StrCat("store: reply for request ", header->request_id,
                                              ", expected ", id, " (", address_, ")"));
  }
  auto payload = DecodeStatus(reply);
  if (!payload.ok()) return payload.status();
  return std::string(*payload);
}

}  // namespace kvgate::store
