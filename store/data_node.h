// File: store/data_node.h
// A data node: contributes one DRAM pool (memfd, so same-host clients map it through the shm
// transport; transparent huge pages asked for) registered with transfer/ as its segment, joins
// the master and heartbeats. Clients READ and WRITE the pool directly; the node itself only
// learns, through heartbeat replies, which objects it holds, so that it can re-register them
// with a new master after a failover. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "store/master_client.h"
#include "store/master_metadata.h"
#include "store/wire.h"
#include "transfer/transfer_engine.h"

namespace kvgate::store {

struct DataNodeOptions {
  std::string name;    // Unique in the store; also the transfer segment name.
  std::string master;  // See MasterClient::Create().
  uint64_t memory = 256ull << 20;
  std::vector<std::string> transports = {"shm", "rdma", "tcp"};
  transfer::TcpParams tcp;
  /// Its node credential for the master, and the set its transfer port checks peers against
  /// (transfer/peer_auth.h). Null: --auth none.
  transfer::PeerAuthPtr auth;
};

class DataNode {
 public:
  /// Allocates the pool and starts joining the master (Start does not wait for it).
  /// @return kInvalidArgument / kResourceExhausted / kUnavailable from the transfer engine.
  static absl::StatusOr<std::unique_ptr<DataNode>> Start(DataNodeOptions options);
  /// Stops heartbeating (the master drops the node after its time-out) and frees the pool.
  ~DataNode();

  const std::string& name() const { return options_.name; }
  uint64_t base() const { return reinterpret_cast<uint64_t>(pool_); }
  uint64_t capacity() const { return options_.memory; }
  /// Whether the node is registered with the current leader.
  bool registered() const { return registered_.load(); }
  /// Objects the node knows it holds (as of the last heartbeat).
  size_t objects() const;
  transfer::TransferEngine& engine() { return *engine_; }

  /// Test hook: flips one byte of the pool at node address `addr`.
  /// @return kOutOfRange outside the pool.
  absl::Status CorruptForTest(uint64_t addr);

 private:
  DataNode(DataNodeOptions options, std::shared_ptr<MasterClient> master, MasterMetadata* metadata,
           std::unique_ptr<transfer::TransferEngine> engine, void* pool);
  void Run();
  bool Register();
  void Apply(const HeartbeatResponse& changes);

  const DataNodeOptions options_;
  std::shared_ptr<MasterClient> master_;
  MasterMetadata* const metadata_;  // Owned by engine_.
  std::unique_ptr<transfer::TransferEngine> engine_;
  void* const pool_;
  std::atomic<bool> registered_{false};
  uint64_t epoch_ = 0;  // Run() only.
  std::chrono::milliseconds heartbeat_{200};
  mutable common::Mutex mu_;
  common::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, NodeObject> objects_ ABSL_GUARDED_BY(mu_);  // By offset.
  std::thread thread_;
};

}  // namespace kvgate::store
