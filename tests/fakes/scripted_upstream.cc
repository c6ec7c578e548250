#include "tests/fakes/scripted_upstream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "tests/support/loopback.h"

namespace kvgate::testing {
namespace {

size_t ContentLength(const std::string& head) {
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t p = lower.find("\ncontent-length:");
  if (p == std::string::npos) return 0;
  return static_cast<size_t>(std::strtoull(lower.c_str() + p + 16, nullptr, 10));
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

ScriptedUpstream::ScriptedUpstream(Responder responder) : responder_(std::move(responder)) {
  listen_fd_ = ListenLoopback(&port_);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

ScriptedUpstream::~ScriptedUpstream() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  {
    common::MutexLock lock(&mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : threads_) t.join();
}

std::string ScriptedUpstream::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::vector<std::string> ScriptedUpstream::requests() const {
  common::MutexLock lock(&mu_);
  return requests_;
}

void ScriptedUpstream::AcceptLoop() {
  while (!stop_) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    common::MutexLock lock(&mu_);
    fds_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void ScriptedUpstream::Serve(int fd) {
  std::string in;
  char buf[65536];
  for (;;) {
    size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return ::close(fd), void();
      in.append(buf, static_cast<size_t>(n));
    }
    const size_t total = head_end + 4 + ContentLength(in.substr(0, head_end + 2));
    while (in.size() < total) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return ::close(fd), void();
      in.append(buf, static_cast<size_t>(n));
    }
    const std::string request = in.substr(0, total);
    in.erase(0, total);
    {
      common::MutexLock lock(&mu_);
      requests_.push_back(request);
    }
    const Script script = responder_(request);
    for (size_t i = 0; i < script.pieces.size(); ++i) {
      if (i > 0 && script.gap.count() > 0) std::this_thread::sleep_for(script.gap);
      if (!SendAll(fd, script.pieces[i])) return ::close(fd), void();
    }
    if (script.close_after) {
      ::shutdown(fd, SHUT_WR);
      // Drain until the gateway closes too, so that the close is a FIN, not a reset.
      while (::recv(fd, buf, sizeof(buf), 0) > 0) {
      }
      ::close(fd);
      return;
    }
  }
}

std::string RawExchange(uint16_t port, const std::string& bytes, std::chrono::milliseconds timeout,
                        bool* closed) {
  std::string out;
  if (closed != nullptr) *closed = false;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return out;
  if (!SendAll(fd, bytes)) {
    ::close(fd);
    return out;
  }
  const auto until = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace kvgate::testing
