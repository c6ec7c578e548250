#include "transfer/rdma/rdma_handshake.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "common/strings.h"
#include "common/url.h"
#include "spdlog/spdlog.h"

namespace kvgate::transfer::rdma_internal {
namespace {

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

// Runs `step` (a blocking peer_auth exchange) on `fd` in blocking mode, bounded by `deadline`.
template <typename Step>
auto WithDeadline(int fd, Clock::time_point deadline, Step step) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const auto left = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  timeval tv{static_cast<time_t>(left / 1000), static_cast<suseconds_t>((left % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  auto result = step();
  timeval none{};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
  fcntl(fd, F_SETFL, flags);
  return result;
}

}  // namespace

uint32_t RandomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xFFFFFF;
}

absl::StatusOr<int> ExchangeHello(const std::string& endpoint, const RdmaHello& hello,
                                  RdmaHelloReply* reply, Clock::time_point deadline,
                                  const PeerAuthPtr& auth, const std::string& segment) {
  auto hp = common::ParseHostPort(endpoint);
  if (!hp.ok()) return absl::UnavailableError(common::StrCat("bad endpoint '", endpoint, "'"));
  auto fd = ConnectTcp(hp->first, hp->second, deadline);
  if (!fd.ok()) return fd.status();
  if (auth != nullptr && auth->self.has_value()) {
    absl::Status proved = WithDeadline(
        *fd, deadline, [&] { return AuthenticateToServer(*fd, *auth->self, segment); });
    if (!proved.ok()) {
      close(*fd);
      return proved;
    }
  }
  if (!WriteExact(*fd, &hello, sizeof(hello), deadline) ||
      !ReadExact(*fd, reply, sizeof(*reply), deadline) || reply->magic != kRdmaHelloMagic ||
      reply->status != 0) {
    close(*fd);
    return absl::UnavailableError(
        common::StrCat(endpoint, " refused the QP exchange (status ", reply->status, ")"));
  }
  return *fd;
}

absl::StatusOr<std::unique_ptr<HandshakeServer>> HandshakeServer::Start(
    const RdmaParams& params, std::string instance,
    const std::vector<std::unique_ptr<RdmaDevice>>* devices, PeerAuthPtr auth,
    std::string segment) {
  std::unique_ptr<HandshakeServer> s(new HandshakeServer(params, std::move(instance), devices));
  s->auth_ = std::move(auth);
  s->segment_ = std::move(segment);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(params.handshake_port);
  if (inet_pton(AF_INET, params.listen_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        common::StrCat("rdma: listen_address '", params.listen_address, "' is not IPv4"));
  }
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (s->listen_fd_ < 0 ||
      bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(s->listen_fd_, 64) != 0) {
    return absl::UnavailableError(
        common::StrCat("rdma: cannot listen for handshakes: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string host = params.advertise_host;
  if (host.empty()) {
    char name[256] = {};
    if (params.listen_address == "0.0.0.0") {
      gethostname(name, sizeof(name) - 1);
      host = name;
    } else {
      host = params.listen_address;
    }
  }
  s->endpoint_ = common::StrCat(host, ":", ntohs(addr.sin_port));
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) return absl::ResourceExhaustedError("rdma: eventfd failed");
  HandshakeServer* raw = s.get();
  s->thread_ = std::thread([raw] { raw->Loop(); });
  return s;
}

HandshakeServer::HandshakeServer(const RdmaParams& params, std::string instance,
                                 const std::vector<std::unique_ptr<RdmaDevice>>* devices)
    : params_(params), instance_(std::move(instance)), devices_(devices) {}

HandshakeServer::~HandshakeServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (Client& c : clients_) {
    for (ibv_qp* qp : c.qps) ibv_destroy_qp(qp);
    close(c.fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HandshakeServer::Accept() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(params_.connect_timeout_ms);
  RdmaHello hello;
  RdmaHelloReply reply;
  Client client;
  client.fd = fd;
  if (auth_ != nullptr) {
    auto who = WithDeadline(fd, deadline, [&] {
      return AuthenticateClient(fd, auth_->verifier, segment_);
    });
    if (!who.ok()) {
      spdlog::warn("rdma: segment '{}': refused a peer: {}", segment_, who.status().message());
      close(fd);
      return;
    }
  }
  if (!ReadExact(fd, &hello, sizeof(hello), deadline) || hello.magic != kRdmaHelloMagic) {
    close(fd);
    return;
  }
  hello.instance[sizeof(hello.instance) - 1] = '\0';
  if (instance_ != hello.instance) {
    reply.status = 1;
  } else if (hello.remote_device >= devices_->size() || hello.qp_count == 0 ||
             hello.qp_count > kMaxQpsPerEndpoint) {
    reply.status = 2;
  } else {
    RdmaDevice& dev = *(*devices_)[hello.remote_device];
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
  clients_.push_back(std::move(client));
}

void HandshakeServer::Loop() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[1].revents != 0) return;  // Stop.
    // A client closing its handshake socket (exit, endpoint rebuilt) releases its QPs.
    for (size_t i = fds.size(); i-- > 2;) {
      if (fds[i].revents == 0) continue;
      char c;
      if (recv(fds[i].fd, &c, 1, MSG_DONTWAIT) > 0) continue;  // Clients send nothing more.
      Client& sc = clients_[i - 2];
      for (ibv_qp* qp : sc.qps) ibv_destroy_qp(qp);
      close(sc.fd);
      clients_.erase(clients_.begin() + static_cast<long>(i - 2));
    }
    if (fds[0].revents & POLLIN) Accept();
  }
}

}  // namespace kvgate::transfer::rdma_internal
