// File: tests/store/store_harness.cc
#include "tests/store/store_harness.h"

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "tests/store/test_credentials.h"

namespace kvgate::testing {

using transfer::PeerRole;

store::MasterServiceOptions TestMasterOptions(bool kv_events) {
  store::MasterServiceOptions mo;
  mo.master.heartbeat_interval = std::chrono::milliseconds(50);
  mo.verifier = TestAuth(PeerRole::kNode)->verifier;
  if (kv_events) {
    mo.events_endpoint = "tcp://127.0.0.1:*";
    mo.replay_endpoint = "tcp://127.0.0.1:*";
  }
  return mo;
}

absl::StatusOr<std::unique_ptr<store::MasterService>> StartTestMaster(
    store::MasterServiceOptions options) {
  return store::MasterService::Start(options);
}

store::DataNodeOptions TestNodeOptions(const std::string& name, const std::string& master,
                                       std::vector<std::string> transports, uint64_t memory) {
  store::DataNodeOptions d;
  d.name = name;
  d.master = master;
  d.memory = memory;
  d.transports = std::move(transports);
  d.tcp.listen_address = "127.0.0.1";
  d.auth = TestAuth(PeerRole::kNode);
  return d;
}

absl::StatusOr<std::unique_ptr<store::DataNode>> StartTestNode(
    const store::DataNodeOptions& options) {
  auto node = store::DataNode::Start(options);
  if (!node.ok()) return node.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(*node)->registered()) {
    if (std::chrono::steady_clock::now() > deadline)
      return absl::DeadlineExceededError("data node " + options.name + " never registered");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return node;
}

store::StoreClientOptions TestClientOptions(const std::string& master,
                                            const std::string& credential,
                                            std::vector<std::string> transports) {
  store::StoreClientOptions o;
  o.master = master;
  o.transports = std::move(transports);
  o.tcp.listen_address = "127.0.0.1";
  o.timeout = std::chrono::seconds(5);
  o.credentials_file = TestCredentialsFile();
  o.credential = credential;
  return o;
}

}  // namespace kvgate::testing
