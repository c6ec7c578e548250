// File: store/admin_http.cc
#include "store/admin_http.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/build_info.h"
#include "common/strings.h"
#include "store/rpc.h"

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
  auto l = ListenTcp(host, port, "store http");
  if (!l.ok()) return l.status();
  return std::unique_ptr<AdminHttpServer>(
      new AdminHttpServer(l->first, l->second, std::move(pages)));
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
  } else if (path == "/version") {
    Reply(fd, 200, "application/json", common::VersionJson());
  } else if (path == "/admin/store") {
    Reply(fd, 200, "application/json", pages_.admin());
  } else {
    Reply(
        fd, 404, "application/json",
        R"({"error":{"message":"not found: try /health, /metrics, /version, /admin/store","type":"not_found_error"}})");
  }
}

}  // namespace kvgate::store
