// File: tests/support/redis_server.cc
#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "tests/support/loopback.h"

namespace kvgate::testing {
namespace {

// True when a PING on a fresh connection gets +PONG (or, with a password set, an auth error:
// the server is up either way).
bool Answers(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{0, 200'000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      write(fd, "PING\r\n", 6) == 6) {
    char buf[64] = {};
    ok = read(fd, buf, sizeof(buf) - 1) > 0 && (buf[0] == '+' || buf[0] == '-');
  }
  close(fd);
  return ok;
}

}  // namespace

std::string FindRedis() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

bool RedisServer::Start(const std::string& binary, const std::string& password) {
  if (port_ == 0) port_ = FreePort();
  std::vector<std::string> args = {
      binary,         "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
      "--appendonly", "no",     "--daemonize",         "no"};
  if (!password.empty()) {
    args.push_back("--requirepass");
    args.push_back(password);
  }
  process_ = std::make_unique<ChildProcess>(std::move(args));
  if (process_->pid() <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Answers(port_)) return true;
    int code = 0;
    if (process_->Exited(&code)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void RedisServer::Stop() {
  if (process_ == nullptr) return;
  process_->Signal(SIGKILL);
  process_->Wait();
  process_.reset();
}

std::string RedisServer::Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

}  // namespace kvgate::testing
