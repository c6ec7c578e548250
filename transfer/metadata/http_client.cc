#include "transfer/metadata/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/strings.h"

namespace kvgate::transfer {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on fd; false on time-out.
bool WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, RemainingMs(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // Let the next call report the error.
  }
}

// Decodes a chunked body; false when malformed.
bool Dechunk(std::string_view in, std::string* out) {
  out->clear();
  for (;;) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    uint64_t n = 0;
    for (char c : in.substr(0, in.find_first_of(";\r"))) {
      const int v = absl::ascii_isdigit(c)   ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
      if (v < 0 || n > (1ull << 40)) return false;
      n = n * 16 + static_cast<uint64_t>(v);
    }
    in.remove_prefix(eol + 2);
    if (n == 0) return true;
    if (in.size() < n + 2) return false;
    out->append(in.substr(0, n));
    in.remove_prefix(n + 2);
  }
}

}  // namespace

absl::StatusOr<HttpResponse> HttpPost(const std::string& host, uint16_t port, std::string_view path,
                                      std::string_view body, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = common::StrCat("http://", host, ":", port, path);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return absl::UnavailableError(common::StrCat(where, ": cannot resolve ", host));
  }
  Fd fd(socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int rc = fd.get() < 0 ? -1 : connect(fd.get(), res->ai_addr, res->ai_addrlen);
  const int connect_errno = errno;
  freeaddrinfo(res);
  if (fd.get() < 0) return absl::UnavailableError(common::StrCat(where, ": socket failed"));
  if (rc != 0) {
    if (connect_errno != EINPROGRESS) {
      return absl::UnavailableError(common::StrCat(where, ": ", std::strerror(connect_errno)));
    }
    if (!WaitFd(fd.get(), POLLOUT, deadline)) {
      return absl::DeadlineExceededError(common::StrCat(where, ": connect timed out"));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return absl::UnavailableError(common::StrCat(where, ": ", std::strerror(err)));
  }
  const std::string request = common::StrCat(
      "POST ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
      "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  for (size_t sent = 0; sent < request.size();) {
    if (!WaitFd(fd.get(), POLLOUT, deadline)) {
      return absl::DeadlineExceededError(common::StrCat(where, ": send timed out"));
    }
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return absl::UnavailableError(common::StrCat(where, ": ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  // Connection: close, so the response ends at EOF.
  std::string raw;
  char buf[16384];
  for (;;) {
    if (!WaitFd(fd.get(), POLLIN, deadline)) {
      return absl::DeadlineExceededError(common::StrCat(where, ": no complete response in time"));
    }
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return absl::UnavailableError(common::StrCat(where, ": ", std::strerror(errno)));
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > (64u << 20)) return absl::InternalError(common::StrCat(where, ": too large"));
  }
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || !absl::StartsWith(raw, "HTTP/1.")) {
    return absl::InternalError(common::StrCat(where, ": malformed response"));
  }
  HttpResponse out;
  const size_t sp = raw.find(' ');
  uint64_t code = 0;
  if (sp == std::string::npos ||
      !common::ParseUint64(std::string_view(raw).substr(sp + 1, 3), &code)) {
    return absl::InternalError(common::StrCat(where, ": malformed status line"));
  }
  out.status = static_cast<int>(code);
  const std::string head = absl::AsciiStrToLower(raw.substr(0, head_end));
  std::string_view rest = std::string_view(raw).substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    if (!Dechunk(rest, &out.body)) {
      return absl::InternalError(common::StrCat(where, ": malformed chunked body"));
    }
  } else {
    out.body = std::string(rest);
  }
  return out;
}

}  // namespace kvgate::transfer
