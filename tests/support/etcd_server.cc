// File: tests/support/etcd_server.cc
#include "tests/support/etcd_server.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/fakes/test_client.h"
#include "tests/support/loopback.h"
#include "tests/support/test_util.h"

namespace kvgate::testing {

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
  process_ = std::make_unique<ChildProcess>(std::vector<std::string>{
      binary, "--name=kvgate-test", "--data-dir=" + dir_.path() + "/data",
      "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
      "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
      "--initial-cluster=kvgate-test=" + peer, "--heartbeat-interval=50",
      "--election-timeout=500"});
  if (process_->pid() <= 0) return false;
  // Ready once a read succeeds (leader elected).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const HttpResponse r = Fetch(client_port_, "POST", "/v3/kv/range", R"({"key":"AA=="})", {},
                                 std::chrono::milliseconds(500));
    if (r.status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string EtcdServer::Uri(const std::string& prefix, int ttl_s) const {
  return "etcd://127.0.0.1:" + std::to_string(client_port_) + "/" + prefix +
         "?ttl_s=" + std::to_string(ttl_s);
}

}  // namespace kvgate::testing
