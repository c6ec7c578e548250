// File: tests/integration/held_connection.h
// A client connection held open by a raw socket, optionally from another loopback address
// (127.0.0.2 and up need no setup on Linux), for the tests of connection limits and floods:
// it can stay idle, send part of a request, or send a whole one and read the answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace kvgate::testing {

class HeldConnection {
 public:
  explicit HeldConnection(uint16_t port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from != nullptr) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &src.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~HeldConnection() { ::close(fd_); }
  HeldConnection(const HeldConnection&) = delete;
  HeldConnection& operator=(const HeldConnection&) = delete;

  bool ok() const { return ok_; }

  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  /// True when the gateway closed it (a read sees EOF or a reset within `wait_ms`).
  bool ClosedByPeer(int wait_ms = 200) {
    timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  /// One response with a Content-Length body (a keep-alive answer), within `wait_ms` a read;
  /// empty when it did not come whole.
  std::string ReadResponse(int wait_ms = 10'000) {
    timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string out;
    char buf[4096];
    for (;;) {
      const size_t head_end = out.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t at = out.find("content-length: ");
        const size_t length = at < head_end ? std::stoul(out.substr(at + 16)) : std::string::npos;
        if (length != std::string::npos && out.size() >= head_end + 4 + length) return out;
      }
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return {};
      out.append(buf, static_cast<size_t>(n));
    }
  }

  /// Everything the gateway sends until it closes or `wait_ms` passes without a byte.
  std::string ReadUntilClose(int wait_ms = 10'000) {
    timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace kvgate::testing
