// File: tests/store/store_harness.h
// The store as most tests start it, in one process: a master and data nodes holding the test
// credentials (tests/store/test_credentials.h), on loopback, and clients of a credential.
//   auto svc = StartTestMaster();                       // or StartTestMaster(options)
//   auto node = StartTestNode(TestNodeOptions("node-a", (*svc)->address()));
//   auto client = StoreClient::Create(TestClientOptions((*svc)->address(), "tenant-a"));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/client.h"
#include "store/data_node.h"
#include "store/master_service.h"

namespace kvgate::testing {

/// A master's options: heartbeats every 50 ms (failures show within a test's time), checking
/// peers against the test credentials. With `kv_events`, it also publishes its KV events and
/// serves their replay, on loopback ports the system picks.
store::MasterServiceOptions TestMasterOptions(bool kv_events = false);
absl::StatusOr<std::unique_ptr<store::MasterService>> StartTestMaster(
    store::MasterServiceOptions options = TestMasterOptions());

/// A data node `name` of `memory` bytes serving `transports`, tcp on loopback, with the node
/// credential.
store::DataNodeOptions TestNodeOptions(const std::string& name, const std::string& master,
                                       std::vector<std::string> transports = {"tcp"},
                                       uint64_t memory = 8 << 20);
/// Starts the node and waits (up to 10 s) until the master has registered it.
absl::StatusOr<std::unique_ptr<store::DataNode>> StartTestNode(
    const store::DataNodeOptions& options);

/// A client of `credential` (empty: the first client credential) over `transports`, tcp on
/// loopback, giving up on a call after 5 s.
store::StoreClientOptions TestClientOptions(const std::string& master,
                                            const std::string& credential = "",
                                            std::vector<std::string> transports = {"tcp"});

}  // namespace kvgate::testing
