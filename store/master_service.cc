// File: store/master_service.cc
#include "store/master_service.h"

#include "absl/strings/escaping.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {
namespace {

absl::Status KeysInScope(const transfer::Principal& peer, Op op,
                         const std::vector<ObjectKey>& keys) {
  for (const ObjectKey& k : keys) {
    if (!peer.InScope(k.ns))
      return absl::PermissionDeniedError(
          common::StrCat("store: ", OpName(op), ": credential '", peer.name,
                         "' may not use namespace '", absl::CHexEscape(k.ns.substr(0, 128)), "'"));
  }
  return absl::OkStatus();
}

template <typename Items>
std::vector<ObjectKey> KeysOf(const Items& items) {
  std::vector<ObjectKey> keys;
  keys.reserve(items.size());
  for (const auto& i : items) keys.push_back(i.key);
  return keys;
}

// Node operations need a node credential whose scope names the node; object operations a
// client credential whose scope holds every key's namespace. Anyone authenticated may say
// hello and look a segment up (clients need the data nodes' descriptors).
absl::Status Authorize(const transfer::Principal& peer, Op op, const Request& req) {
  if (peer.unrestricted) return absl::OkStatus();
  auto node_only = [&](const std::string& node) -> absl::Status {
    if (peer.role == transfer::PeerRole::kNode && peer.InScope(node)) return absl::OkStatus();
    return absl::PermissionDeniedError(
        common::StrCat("store: ", OpName(op), " for node '", absl::CHexEscape(node.substr(0, 128)),
                       "' needs a node credential for it; '", peer.name, "' is a ",
                       transfer::PeerRoleName(peer.role), " credential",
                       peer.role == transfer::PeerRole::kNode ? " for other nodes" : ""));
  };
  auto client_keys = [&](const std::vector<ObjectKey>& keys) -> absl::Status {
    if (peer.role != transfer::PeerRole::kClient)
      return absl::PermissionDeniedError(common::StrCat(
          "store: ", OpName(op), ": node credential '", peer.name, "' cannot touch objects"));
    return KeysInScope(peer, op, keys);
  };
  switch (op) {
    case Op::kHello:
    case Op::kLookupSegment:
      return absl::OkStatus();
    case Op::kRegisterNode:
      return node_only(std::get<RegisterNodeRequest>(req).node);
    case Op::kHeartbeat:
      return node_only(std::get<HeartbeatRequest>(req).node);
    case Op::kPublishSegment:
      return node_only(std::get<PublishSegmentRequest>(req).name);
    case Op::kExists:
      return client_keys(std::get<ExistsRequest>(req).keys);
    case Op::kPutStart:
      return client_keys(KeysOf(std::get<PutStartRequest>(req).items));
    case Op::kPutEnd:
      return client_keys(KeysOf(std::get<PutEndRequest>(req).items));
    case Op::kWaitKeys:
      return client_keys(std::get<WaitKeysRequest>(req).keys);
    case Op::kGet:
      return client_keys(std::get<GetRequest>(req).keys);
    case Op::kRemove:
      return client_keys(std::get<RemoveRequest>(req).keys);
    case Op::kPin:
      return client_keys(std::get<PinRequest>(req).keys);
  }
  return absl::PermissionDeniedError("store: unknown op");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MasterService>> MasterService::Start(MasterServiceOptions options) {
  auto svc = std::unique_ptr<MasterService>(new MasterService(std::move(options)));
  MasterService* s = svc.get();
  const MasterServiceOptions& o = s->options_;
  if (!o.events_endpoint.empty()) {
    auto events = EventStream::Start(o.events_endpoint, o.replay_endpoint);
    if (!events.ok()) return events.status();
    s->events_ = std::move(*events);
  }
  auto server = RpcServer::Start(
      o.listen_host, o.listen_port, o.verifier,
      [s](const transfer::Principal& peer, Op op, std::string_view body) {
        return s->Handle(peer, op, body);
      },
      o.limits);
  if (!server.ok()) return server.status();
  s->server_ = std::move(*server);
  s->address_ = o.advertise.empty()
                    ? common::StrCat(o.listen_host == "0.0.0.0" ? "127.0.0.1" : o.listen_host, ":",
                                     s->server_->port())
                    : o.advertise;
  if (o.etcd.empty()) {
    s->SetLeader(true);
  } else {
    auto etcd = ParseEtcdUri(o.etcd);
    if (!etcd.ok()) return etcd.status();
    s->election_ = std::make_unique<LeaderElection>(std::move(*etcd), s->address_, o.etcd_ttl_s,
                                                    [s](bool leader) { s->SetLeader(leader); });
  }
  s->ticker_ = std::thread([s] { s->Tick(); });
  return svc;
}

MasterService::~MasterService() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (ticker_.joinable()) ticker_.join();
  election_.reset();  // Resigns first, so a standby takes over while we close connections.
  server_.reset();
}

std::shared_ptr<Master> MasterService::master() const {
  common::MutexLock lock(&mu_);
  return master_;
}

void MasterService::SetLeader(bool leader) {
  common::MutexLock lock(&mu_);
  // A new term starts empty: what a previous term knew may be stale, and data nodes
  // re-register what they really hold.
  master_ = leader ? std::make_shared<Master>(options_.master, events_.get()) : nullptr;
  leader_ = leader;
}

void MasterService::Tick() {
  const auto period =
      std::max(options_.master.heartbeat_interval / 2, std::chrono::milliseconds(20));
  for (;;) {
    if (auto m = master()) m->Tick();
    common::MutexLock lock(&mu_);
    if (stop_) return;
    cv_.WaitFor(&mu_, period);
    if (stop_) return;
  }
}

void MasterService::RememberNodeKey(const transfer::Principal& peer, const std::string& node) {
  if (peer.unrestricted || options_.verifier == nullptr) return;
  const transfer::Credential* cred = options_.verifier->Find(peer.name);
  if (cred == nullptr) return;
  auto signer =
      std::make_unique<transfer::CapabilitySigner>(transfer::CapabilityKey(cred->secret), node);
  common::MutexLock lock(&keys_mu_);
  signers_[node] = std::move(signer);
}

void MasterService::Sign(const transfer::Principal& peer, std::vector<Replica>& replicas,
                         uint64_t length, uint8_t modes, uint64_t expires) const {
  if (peer.unrestricted || length == 0) return;
  common::MutexLock lock(&keys_mu_);
  for (Replica& r : replicas) {
    auto it = signers_.find(r.segment);
    // A node this master never saw register cannot check one either: nothing to sign.
    if (it == signers_.end()) continue;
    r.capability =
        transfer::EncodeCapability(it->second->Sign(peer.name, modes, r.addr, length, expires));
  }
}

std::string MasterService::Handle(const transfer::Principal& peer, Op op, std::string_view body) {
  requests_[static_cast<size_t>(op)].fetch_add(1, std::memory_order_relaxed);
  auto decoded = DecodeRequest(op, body);
  if (!decoded.ok()) {
    bad_requests_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("store: bad {} request: {}", OpName(op), decoded.status().message());
    return EncodeStatus(decoded.status());
  }
  if (auto allowed = Authorize(peer, op, *decoded); !allowed.ok()) {
    denied_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("{}", allowed.message());
    return EncodeStatus(allowed);
  }
  std::shared_ptr<Master> m = master();
  if (op == Op::kHello) {
    return EncodeStatus(absl::OkStatus()) +
           Encode(HelloResponse{kProtocolVersion, address_, m != nullptr});
  }
  if (m == nullptr)
    return EncodeStatus(absl::UnavailableError(
        common::StrCat("store: master ", address_, " is a standby, not the leader")));
  auto ok = [](const auto& resp) { return EncodeStatus(absl::OkStatus()) + Encode(resp); };
  auto ok_or = [&](const auto& r) { return r.ok() ? ok(*r) : EncodeStatus(r.status()); };
  Request& req = *decoded;
  switch (op) {
    case Op::kRegisterNode: {
      const auto& reg = std::get<RegisterNodeRequest>(req);
      auto r = m->RegisterNode(reg);
      if (r.ok()) RememberNodeKey(peer, reg.node);
      return ok_or(r);
    }
    case Op::kHeartbeat:
      return ok_or(m->Heartbeat(std::get<HeartbeatRequest>(req)));
    case Op::kPublishSegment:
      if (auto s = m->PublishSegment(std::get<PublishSegmentRequest>(req)); !s.ok())
        return EncodeStatus(s);
      return ok(EmptyResponse{});
    case Op::kLookupSegment:
      return ok_or(m->LookupSegment(std::get<LookupSegmentRequest>(req)));
    case Op::kExists:
      return ok(m->Exists(std::get<ExistsRequest>(req)));
    case Op::kPutStart: {
      const auto& start = std::get<PutStartRequest>(req);
      PutStartResponse r = m->PutStart(start);
      // Write access until the put times out (then its range may go to another object).
      const uint64_t expires =
          transfer::UnixSeconds() +
          std::chrono::ceil<std::chrono::seconds>(options_.master.put_timeout + kCapabilitySkew)
              .count();
      for (size_t i = 0; i < r.items.size() && i < start.items.size(); ++i) {
        uint64_t length = 0;
        for (uint64_t s : start.items[i].slices) length += s;  // Checked by PutStart.
        if (start.want_capabilities)
          Sign(peer, r.items[i].replicas, length, transfer::kCapabilityWrite, expires);
      }
      return ok(r);
    }
    case Op::kPutEnd:
      return ok(m->PutEnd(std::get<PutEndRequest>(req)));
    case Op::kWaitKeys:
      return ok(m->WaitKeys(std::get<WaitKeysRequest>(req)));
    case Op::kGet: {
      const auto& get = std::get<GetRequest>(req);
      GetResponse r = m->Get(get);
      // Read access while the lease protects the object from eviction (as Master::Get grants).
      const auto& mo = options_.master;
      const auto lease = get.lease_ms > 0
                             ? std::min<std::chrono::milliseconds>(
                                   std::chrono::milliseconds(get.lease_ms), mo.max_lease)
                             : mo.default_get_lease;
      const uint64_t expires =
          transfer::UnixSeconds() +
          std::chrono::ceil<std::chrono::seconds>(lease + kCapabilitySkew).count();
      for (GetItemResult& it : r.items) {
        uint64_t length = 0;
        for (uint64_t s : it.slices) length += s;
        if (get.want_capabilities)
          Sign(peer, it.replicas, length, transfer::kCapabilityRead, expires);
      }
      return ok(r);
    }
    case Op::kRemove:
      return ok(m->Remove(std::get<RemoveRequest>(req)));
    case Op::kPin:
      return ok(m->Pin(std::get<PinRequest>(req)));
    case Op::kHello:
      break;
  }
  return EncodeStatus(absl::InternalError("store: unhandled op"));
}

}  // namespace kvgate::store
