// File: store/admin_http.cc
#include "store/admin_http.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

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

// One thread multiplexes every connection: a peer that sends its head a byte at a time holds
// only its own slot (until its deadline), never /health for everyone else.
void AdminHttpServer::Run() {
  struct Pending {
    int fd;
    std::string head;
    std::chrono::steady_clock::time_point deadline;
  };
  constexpr size_t kMaxPending = 64;
  constexpr auto kHeadTimeout = std::chrono::seconds(2);
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.assign(1, {fd_, POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 200) < 0 && errno != EINTR) return;
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    std::vector<Pending> next;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      bool done = false, keep = now < p.deadline;
      if (keep && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[2048];
        const ssize_t n = ::recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) p.head.append(buf, static_cast<size_t>(n));
        keep = n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
        done = p.head.find("\r\n\r\n") != std::string::npos || p.head.size() >= 16384;
      }
      if (done) {
        Respond(p.fd, p.head);
        keep = false;
      }
      if (keep) {
        next.push_back(std::move(p));
      } else {
        ::close(p.fd);
      }
    }
    pending.swap(next);
    if (fds[0].revents & POLLIN) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        if (pending.size() >= kMaxPending) {  // The oldest gives way.
          ::close(pending.front().fd);
          pending.erase(pending.begin());
        }
        timeval tv{2, 0};  // A reply's send must not hang on a peer that does not read.
        ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        pending.push_back({c, {}, now + kHeadTimeout});
      } else if (errno == EMFILE || errno == ENFILE) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Do not spin.
      }
    }
  }
  for (const Pending& p : pending) ::close(p.fd);
}

void AdminHttpServer::Respond(int fd, const std::string& head) {
  // A blocking send (bounded by SO_SNDTIMEO) for the reply.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
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
