// File: store/master_service.cc
#include "store/master_service.h"

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {

absl::StatusOr<std::unique_ptr<MasterService>> MasterService::Start(MasterServiceOptions options) {
  auto svc = std::unique_ptr<MasterService>(new MasterService(std::move(options)));
  MasterService* s = svc.get();
  const MasterServiceOptions& o = s->options_;
  if (!o.events_endpoint.empty()) {
    auto events = EventStream::Start(o.events_endpoint, o.replay_endpoint);
    if (!events.ok()) return events.status();
    s->events_ = std::move(*events);
  }
  auto server = RpcServer::Start(o.listen_host, o.listen_port,
                                 [s](Op op, std::string_view body) { return s->Handle(op, body); });
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
    transfer::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (ticker_.joinable()) ticker_.join();
  election_.reset();  // Resigns first, so a standby takes over while we close connections.
  server_.reset();
}

std::shared_ptr<Master> MasterService::master() const {
  transfer::MutexLock lock(&mu_);
  return master_;
}

void MasterService::SetLeader(bool leader) {
  transfer::MutexLock lock(&mu_);
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
    transfer::MutexLock lock(&mu_);
    if (stop_) return;
    cv_.WaitFor(&mu_, period);
    if (stop_) return;
  }
}

std::string MasterService::Handle(Op op, std::string_view body) {
  requests_[static_cast<size_t>(op)].fetch_add(1, std::memory_order_relaxed);
  auto decoded = DecodeRequest(op, body);
  if (!decoded.ok()) {
    bad_requests_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("store: bad {} request: {}", OpName(op), decoded.status().message());
    return EncodeStatus(decoded.status());
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
    case Op::kRegisterNode:
      return ok_or(m->RegisterNode(std::get<RegisterNodeRequest>(req)));
    case Op::kHeartbeat:
      return ok_or(m->Heartbeat(std::get<HeartbeatRequest>(req)));
    case Op::kPublishSegment:
      m->PublishSegment(std::get<PublishSegmentRequest>(req));
      return ok(EmptyResponse{});
    case Op::kLookupSegment:
      return ok_or(m->LookupSegment(std::get<LookupSegmentRequest>(req)));
    case Op::kExists:
      return ok(m->Exists(std::get<ExistsRequest>(req)));
    case Op::kPutStart:
      return ok(m->PutStart(std::get<PutStartRequest>(req)));
    case Op::kPutEnd:
      return ok(m->PutEnd(std::get<PutEndRequest>(req)));
    case Op::kWaitKeys:
      return ok(m->WaitKeys(std::get<WaitKeysRequest>(req)));
    case Op::kGet:
      return ok(m->Get(std::get<GetRequest>(req)));
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
