// File: store/master_service.h
// The master role of kvgate-store on the network: the wire protocol (store/rpc.h) in front of a
// Master, the periodic tick (node time-outs, abandoned puts, watermark eviction), the KV-event
// stream and, with etcd, leader election. A standby answers Hello (leader: false) and refuses
// everything else with kUnavailable, which makes clients look for the leader; when it becomes
// leader it starts from an empty Master that data nodes fill by re-registering. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "store/event_stream.h"
#include "store/leader_election.h"
#include "store/master.h"
#include "store/rpc.h"
#include "transfer/capability.h"

namespace kvgate::store {

/// How long past its lease (get) or the put time-out (put_start) a capability stays valid:
/// room for clock skew between master and data nodes, counted in whole seconds.
inline constexpr std::chrono::seconds kCapabilitySkew{5};

struct MasterServiceOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;
  std::string advertise;  // host:port published in etcd; default listen host:bound port.
  std::string etcd;       // "etcd://..." for HA; empty: a single master, always the leader.
  uint32_t etcd_ttl_s = 3;
  std::string events_endpoint;  // ZMQ PUB, e.g. "tcp://*:5557"; empty: no KV events.
  std::string replay_endpoint;
  /// Who may connect (transfer/peer_auth.h); null only with --auth none.
  std::shared_ptr<const transfer::CredentialSet> verifier;
  RpcLimits limits;
  MasterOptions master;
};

class MasterService {
 public:
  static absl::StatusOr<std::unique_ptr<MasterService>> Start(MasterServiceOptions options);
  ~MasterService();

  uint16_t port() const { return server_->port(); }
  const std::string& address() const { return address_; }
  bool leader() const { return leader_.load(); }
  /// The Master while leading (nullptr on a standby).
  std::shared_ptr<Master> master() const;
  EventStream* events() const { return events_.get(); }
  uint64_t requests(Op op) const { return requests_[static_cast<size_t>(op)].load(); }
  uint64_t bad_requests() const { return bad_requests_.load(); }
  uint64_t protocol_errors() const { return server_->protocol_errors(); }
  /// Requests refused for the credential's role or scope; connections that failed to
  /// authenticate or were over a limit.
  uint64_t denied_requests() const { return denied_.load(); }
  uint64_t auth_failures() const { return server_->auth_failures(); }
  uint64_t refused_connections() const { return server_->refused_connections(); }

 private:
  explicit MasterService(MasterServiceOptions options) : options_(std::move(options)) {}
  std::string Handle(const transfer::Principal& peer, Op op, std::string_view body);
  /// Remembers the capability key of the credential `node` registered with.
  void RememberNodeKey(const transfer::Principal& peer, const std::string& node);
  /// Signs each replica for `peer`: [addr, addr + length) in `modes` until `expires`.
  void Sign(const transfer::Principal& peer, std::vector<Replica>& replicas, uint64_t length,
            uint8_t modes, uint64_t expires) const;
  void SetLeader(bool leader);
  void Tick();

  const MasterServiceOptions options_;
  std::string address_;
  std::unique_ptr<EventStream> events_;
  std::atomic<bool> leader_{false};
  mutable common::Mutex mu_;
  common::CondVar cv_;
  std::shared_ptr<Master> master_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::array<std::atomic<uint64_t>, 16> requests_{};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> denied_{0};
  // Node name -> a signer keyed by the node credential it registered with.
  mutable common::Mutex keys_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<transfer::CapabilitySigner>> signers_
      ABSL_GUARDED_BY(keys_mu_);
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<LeaderElection> election_;
  std::thread ticker_;
};

}  // namespace kvgate::store
