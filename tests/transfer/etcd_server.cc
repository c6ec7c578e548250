// File: tests/transfer/etcd_server.cc
#include "tests/transfer/etcd_server.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/url.h"
#include "net/http_client.h"

extern char** environ;

namespace kvgate::transfer::testing {

std::string FindEtcd() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

bool EtcdServer::Start(const std::string& binary) {
  client_port_ = FreePort();
  const uint16_t peer_port = FreePort();
  const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
  log_ = dir_.path() + "/etcd.log";
  std::vector<std::string> args = {binary,
                                   "--name=kvgate-test",
                                   "--data-dir=" + dir_.path() + "/data",
                                   "--listen-client-urls=" + client,
                                   "--advertise-client-urls=" + client,
                                   "--listen-peer-urls=" + peer,
                                   "--initial-advertise-peer-urls=" + peer,
                                   "--initial-cluster=kvgate-test=" + peer,
                                   "--heartbeat-interval=50",
                                   "--election-timeout=500"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  // Ready once a read succeeds (leader elected).
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    auto r = router::HttpCallBlocking(common::HttpUrl{"http", "127.0.0.1", client_port_, ""},
                                      "POST", "/v3/kv/range", "{\"key\":\"AA==\"}",
                                      std::chrono::milliseconds(500));
    if (r.ok() && r->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}
EtcdServer::~EtcdServer() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}
std::string EtcdServer::Uri(const std::string& prefix, int ttl_s) const {
  return "etcd://127.0.0.1:" + std::to_string(client_port_) + "/" + prefix +
         "?ttl_s=" + std::to_string(ttl_s);
}

}  // namespace kvgate::transfer::testing
