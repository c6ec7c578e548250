// File: store/leader_election.cc
#include "store/leader_election.h"

#include "absl/strings/escaping.h"
#include "common/json_util.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "common/url.h"
#include "net/http_client.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"
#include "store/rpc.h"

namespace kvgate::store {
namespace {

namespace od = simdjson::ondemand;
constexpr std::chrono::milliseconds kEtcdTimeout{1500};

std::string B64(std::string_view s) {
  return absl::Base64Escape(absl::string_view(s.data(), s.size()));
}

std::string LeaderKey(const EtcdEndpoints& etcd) { return etcd.prefix + "/store/leader"; }

absl::StatusOr<std::string> Call(const EtcdEndpoints& etcd, std::string_view path,
                                 const std::string& body) {
  absl::Status last = absl::UnavailableError("etcd: no endpoints");
  for (const auto& [host, port] : etcd.endpoints) {
    auto r = router::HttpCallBlocking(common::HttpUrl{"http", host, port, ""}, "POST",
                                      std::string(path), body, kEtcdTimeout);
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    if (r->status != 200)
      return absl::UnavailableError(
          common::StrCat("etcd ", host, ":", port, path, ": HTTP ", r->status, ": ", r->body));
    return std::move(r->body);
  }
  return last;
}

// The first string value of `field` found anywhere in the reply (etcd's replies are small).
std::string FindString(const std::string& body, std::string_view field) {
  const std::string needle = common::StrCat("\"", field, "\":\"");
  size_t at = body.find(needle);
  if (at == std::string::npos) return {};
  at += needle.size();
  size_t end = body.find('"', at);
  return end == std::string::npos ? std::string() : body.substr(at, end - at);
}

}  // namespace

absl::StatusOr<EtcdEndpoints> ParseEtcdUri(std::string_view uri) {
  if (uri.substr(0, 7) != "etcd://")
    return absl::InvalidArgumentError(common::StrCat("'", uri, "': expected etcd://HOST:PORT"));
  std::string_view rest = uri.substr(7);
  EtcdEndpoints out;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    out.prefix = std::string(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
  }
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    auto hp = common::ParseHostPort(rest.substr(0, comma));
    if (!hp.ok())
      return absl::InvalidArgumentError(common::StrCat("'", uri, "': ", hp.status().message()));
    out.endpoints.push_back(*hp);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (out.endpoints.empty() || out.prefix.empty())
    return absl::InvalidArgumentError(common::StrCat("'", uri, "': no endpoint or empty prefix"));
  return out;
}

absl::StatusOr<std::string> ReadLeader(const EtcdEndpoints& etcd) {
  std::string body = "{\"key\":";
  common::AppendJsonString(body, B64(LeaderKey(etcd)));
  body.push_back('}');
  auto r = Call(etcd, "/v3/kv/range", body);
  if (!r.ok()) return r.status();
  const std::string value = FindString(*r, "value");
  std::string address;
  if (value.empty() || !absl::Base64Unescape(absl::string_view(value), &address) || address.empty())
    return absl::NotFoundError("store: no master leader in etcd (an election in progress?)");
  return address;
}

LeaderElection::LeaderElection(EtcdEndpoints etcd, std::string address, uint32_t ttl_s,
                               std::function<void(bool)> on_change)
    : etcd_(std::move(etcd)),
      address_(std::move(address)),
      ttl_s_(ttl_s),
      on_change_(std::move(on_change)) {
  thread_ = std::thread([this] { Run(); });
}

LeaderElection::~LeaderElection() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  if (lease_ != 0)
    (void)Call(etcd_, "/v3/lease/revoke", common::StrCat("{\"ID\":\"", lease_, "\"}"));
}

bool LeaderElection::Campaign() {
  // A standby keeps its lease alive too: a txn naming an expired lease fails for good.
  if (lease_ != 0 && !KeepAlive()) lease_ = 0;
  if (lease_ == 0) {
    auto r = Call(etcd_, "/v3/lease/grant", common::StrCat("{\"TTL\":", ttl_s_, "}"));
    if (!r.ok()) {
      spdlog::warn("store: election: {}", r.status().message());
      return false;
    }
    uint64_t id = 0;
    if (!common::ParseUint64(FindString(*r, "ID"), &id) || id == 0) return false;
    lease_ = static_cast<int64_t>(id);
  }
  const std::string key = B64(LeaderKey(etcd_));
  std::string body = "{\"compare\":[{\"key\":\"" + key +
                     "\",\"result\":\"EQUAL\",\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
                     "\"success\":[{\"request_put\":{\"key\":\"" +
                     key + "\",\"value\":\"" + B64(address_) + "\",\"lease\":\"" +
                     std::to_string(lease_) + "\"}}]}";
  auto r = Call(etcd_, "/v3/kv/txn", body);
  if (!r.ok()) {
    lease_ = 0;  // Most likely "requested lease not found": start over with a new one.
    return false;
  }
  return r->find("\"succeeded\":true") != std::string::npos;
}

bool LeaderElection::KeepAlive() {
  auto r = Call(etcd_, "/v3/lease/keepalive", common::StrCat("{\"ID\":\"", lease_, "\"}"));
  if (!r.ok()) return true;  // etcd unreachable for a moment: the lease may still be valid.
  uint64_t ttl = 0;          // etcd omits TTL (or sends 0) once the lease is gone.
  return common::ParseUint64(FindString(*r, "TTL"), &ttl) && ttl > 0;
}

void LeaderElection::Run() {
  const auto period = std::chrono::milliseconds(std::max<uint32_t>(ttl_s_ * 1000 / 3, 100));
  const auto retry = std::chrono::milliseconds(200);
  for (;;) {
    const bool was = leader_.load();
    bool now = was;
    if (!was) {
      now = Campaign();
    } else if (!KeepAlive()) {
      spdlog::error("store: lost the master lease; stepping down");
      lease_ = 0;
      now = false;
    }
    if (now != was) {
      if (now) spdlog::info("store: this master ({}) is the leader", address_);
      leader_ = now;
      on_change_(now);
    }
    common::MutexLock lock(&mu_);
    if (stop_ || (!cv_.WaitFor(&mu_, now ? period : retry) && stop_)) break;
    if (stop_) break;
  }
}

}  // namespace kvgate::store
