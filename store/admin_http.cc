// File: store/admin_http.cc
#include "store/admin_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace kvgate::store {
namespace {

void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void Reply(int fd, int status, std::string_view content_type, std::string_view body) {
  const char* reason = status == 200   ? "OK"
                       : status == 404 ? "Not Found"
                       : status == 503 ? "Service Unavailable"
                                       : "Bad Request";
  SendAll(fd, common::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                             "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n",
                             body));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(const std::string& host,
                                                                        uint16_t port,
                                                                        AdminPages pages) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return absl::UnavailableError(
        common::StrCat("store http: cannot resolve ", host, ": ", gai_strerror(rc)));
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok =
      fd >= 0 && ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  ::freeaddrinfo(res);
  if (!ok) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        common::StrCat("store http: cannot listen on ", host, ":", port, ": ", std::strerror(err)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const uint16_t bound =
      ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::unique_ptr<AdminHttpServer>(new AdminHttpServer(fd, bound, std::move(pages)));
}

AdminHttpServer::AdminHttpServer(int fd, uint16_t port, AdminPages pages)
    : fd_(fd), port_(port), pages_(std::move(pages)) {
  thread_ = std::thread([this] { Run(); });
}

AdminHttpServer::~AdminHttpServer() {
  stop_ = true;
  ::shutdown(fd_, SHUT_RDWR);
  thread_.join();
  ::close(fd_);
}

void AdminHttpServer::Run() {
  while (!stop_) {
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) continue;
      return;
    }
    Serve(c);
    ::close(c);
  }
}

void AdminHttpServer::Serve(int fd) {
  // The request head only (GETs have no body), bounded in size and time.
  std::string head;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) != 1) return;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    head.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = head.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : head.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    Reply(fd, 400, "application/json",
          R"({"error":{"message":"malformed request line","type":"invalid_request_error"}})");
    return;
  }
  const std::string method = head.substr(0, sp1);
  std::string path = head.substr(sp1 + 1, sp2 - sp1 - 1);
  if (size_t q = path.find('?'); q != std::string::npos) path.resize(q);
  if (method != "GET" && method != "HEAD") {
    Reply(fd, 400, "application/json",
          R"({"error":{"message":"only GET is served here","type":"invalid_request_error"}})");
  } else if (path == "/health") {
    auto [status, body] = pages_.health();
    Reply(fd, status, "application/json", body);
  } else if (path == "/metrics") {
    Reply(fd, 200, "text/plain; version=0.0.4; charset=utf-8", pages_.metrics());
  } else if (path == "/admin/store") {
    Reply(fd, 200, "application/json", pages_.admin());
  } else {
    Reply(
        fd, 404, "application/json",
        R"({"error":{"message":"not found: try /health, /metrics, /admin/store","type":"not_found_error"}})");
  }
}

}  // namespace kvgate::store
