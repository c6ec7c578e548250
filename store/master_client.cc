// File: store/master_client.cc
#include "store/master_client.h"

#include <thread>

#include "common/mutex.h"
#include "common/strings.h"
#include "common/url.h"
#include "spdlog/spdlog.h"

namespace kvgate::store {

absl::StatusOr<std::unique_ptr<MasterClient>> MasterClient::Create(
    std::string master, std::string client_name, std::chrono::milliseconds timeout,
    std::optional<transfer::Credential> credential) {
  std::optional<EtcdEndpoints> etcd;
  std::vector<std::string> masters;
  if (master.rfind("etcd://", 0) == 0) {
    auto e = ParseEtcdUri(master);
    if (!e.ok()) return e.status();
    etcd = std::move(*e);
  } else {
    std::string_view rest = master;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view one = rest.substr(0, comma);
      if (auto hp = common::ParseHostPort(one); !hp.ok()) return hp.status();
      masters.emplace_back(one);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (masters.empty()) return absl::InvalidArgumentError("store: no master address");
  }
  return std::unique_ptr<MasterClient>(new MasterClient(
      std::move(masters), std::move(etcd), std::move(client_name), timeout, std::move(credential)));
}

MasterClient::MasterClient(std::vector<std::string> masters, std::optional<EtcdEndpoints> etcd,
                           std::string client_name, std::chrono::milliseconds timeout,
                           std::optional<transfer::Credential> credential)
    : masters_(std::move(masters)),
      etcd_(std::move(etcd)),
      client_name_(std::move(client_name)),
      timeout_(timeout),
      credential_(std::move(credential)) {}

std::string MasterClient::leader() const {
  common::MutexLock lock(&calls_.mu);
  return calls_.conn ? calls_.conn->address() : std::string();
}

absl::Status MasterClient::ResolveLocked(Lane& lane,
                                         std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> candidates = masters_;
  if (etcd_) {
    auto leader = ReadLeader(*etcd_);
    if (!leader.ok()) return leader.status();
    candidates = {*leader};
  }
  absl::Status last = absl::UnavailableError("store: no master answered as leader");
  for (const std::string& address : candidates) {
    auto hp = common::ParseHostPort(address);
    if (!hp.ok()) return hp.status();
    auto conn = std::make_unique<RpcConnection>(hp->first, hp->second, credential_);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto payload = conn->Call(Op::kHello, EncodeRequest(HelloRequest{client_name_}),
                              std::clamp(left, std::chrono::milliseconds(50), timeout_));
    HelloResponse hello;
    if (!payload.ok()) {
      last = payload.status();
      if (absl::IsUnauthenticated(last)) return last;  // Another master would answer the same.
    } else if (auto s = Decode(*payload, &hello); !s.ok()) {
      last = s;
    } else if (!hello.leader) {
      last = absl::UnavailableError(common::StrCat("store: master ", address, " is a standby"));
    } else {
      lane.conn = std::move(conn);
      return absl::OkStatus();
    }
  }
  return last;
}

absl::StatusOr<std::string> MasterClient::CallRaw(Op op, const std::string& body) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  Lane& lane = op == Op::kWaitKeys ? waits_ : calls_;
  common::MutexLock lock(&lane.mu);
  absl::Status last;
  for (int attempt = 0;; ++attempt) {
    if (!lane.conn) last = ResolveLocked(lane, deadline);
    if (absl::IsUnauthenticated(last)) return last;
    if (lane.conn) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto r = lane.conn->Call(op, body, std::max(left, std::chrono::milliseconds(50)));
      if (r.ok() || !absl::IsUnavailable(r.status())) return r;
      last = r.status();  // The leader went away or stepped down: find the new one.
      lane.conn.reset();
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20 * (attempt + 1), 200)));
  }
  return absl::UnavailableError(common::StrCat("store: ", OpName(op), ": no master leader within ",
                                               timeout_.count(), " ms: ", last.message()));
}

}  // namespace kvgate::store
