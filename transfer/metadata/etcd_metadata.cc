#include "transfer/metadata/etcd_metadata.h"

#include "absl/strings/escaping.h"
#include "common/json_util.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "common/url.h"
#include "net/http_client.h"
#include "simdjson.h"
#include "spdlog/spdlog.h"

namespace kvgate::transfer {
namespace {

namespace od = simdjson::ondemand;

std::string B64(std::string_view s) {
  return absl::Base64Escape(absl::string_view(s.data(), s.size()));
}

// grpc-gateway writes int64 as a JSON string; accept a number too.
bool ReadInt64(od::value v, int64_t* out) {
  std::string_view s;
  if (!v.get_string().get(s)) {
    uint64_t u = 0;
    if (!common::ParseUint64(s, &u)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  return !v.get_int64().get(*out);
}

// Fields "ID" and "TTL" of a lease response (top level, or under "result" for keep-alives).
struct LeaseReply {
  int64_t id = 0;
  int64_t ttl = 0;
};

absl::StatusOr<LeaseReply> ParseLease(const std::string& body, bool wrapped) {
  simdjson::padded_string padded(body);
  od::parser parser;
  od::document doc;
  od::object obj;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(obj)) {
    return absl::InternalError(common::StrCat("etcd: malformed lease reply: ", body));
  }
  LeaseReply r;
  if (wrapped) {
    od::object inner;
    if (obj.find_field_unordered("result").get_object().get(inner)) {
      return absl::InternalError(common::StrCat("etcd: keep-alive reply without result: ", body));
    }
    obj = inner;
  }
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) break;
    if (key == "ID") {
      ReadInt64(field.value(), &r.id);
    } else if (key == "TTL") {
      ReadInt64(field.value(), &r.ttl);
    }
  }
  return r;
}

}  // namespace

EtcdMetadata::EtcdMetadata(EtcdParams params) : params_(std::move(params)) {
  thread_ = std::thread([this] { KeepAlive(); });
}

EtcdMetadata::~EtcdMetadata() {
  int64_t lease = 0;
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
    lease = lease_;
  }
  thread_.join();
  if (lease != 0) {
    (void)Call("/v3/lease/revoke", common::StrCat("{\"ID\":\"", lease, "\"}"));
  }
}

std::string EtcdMetadata::Key(std::string_view name) const {
  return common::StrCat(params_.prefix, "/transfer/segments/", name);
}

absl::StatusOr<std::string> EtcdMetadata::Call(std::string_view path, const std::string& body) {
  absl::Status last = absl::UnavailableError("etcd: no endpoints configured");
  for (const auto& [host, port] : params_.endpoints) {
    auto r =
        router::HttpCallBlocking(common::HttpUrl{"http", host, port, ""}, "POST", std::string(path),
                                 body, std::chrono::milliseconds(params_.request_timeout_ms));
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    if (r->status != 200) {
      return absl::UnavailableError(
          common::StrCat("etcd ", host, ":", port, path, ": HTTP ", r->status, ": ", r->body));
    }
    return std::move(r->body);
  }
  return absl::UnavailableError(common::StrCat("etcd: ", last.message()));
}

absl::Status EtcdMetadata::GrantLocked() {
  auto body = Call("/v3/lease/grant", common::StrCat("{\"TTL\":", params_.lease_ttl_s, "}"));
  if (!body.ok()) return body.status();
  auto lease = ParseLease(*body, /*wrapped=*/false);
  if (!lease.ok()) return lease.status();
  if (lease->id == 0)
    return absl::UnavailableError(common::StrCat("etcd: no lease granted: ", *body));
  lease_ = lease->id;
  return absl::OkStatus();
}

absl::Status EtcdMetadata::PutLocked(const std::string& name, const std::string& value) {
  std::string body = "{\"key\":";
  common::AppendJsonString(body, B64(Key(name)));
  body.append(",\"value\":");
  common::AppendJsonString(body, B64(value));
  common::StrAppend(&body, ",\"lease\":\"", lease_, "\"}");
  auto r = Call("/v3/kv/put", body);
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status EtcdMetadata::Publish(const SegmentDescriptor& desc) {
  const std::string value = SegmentToJson(desc);
  common::MutexLock lock(&mu_);
  if (lease_ == 0) {
    if (auto st = GrantLocked(); !st.ok()) return st;
  }
  absl::Status st = PutLocked(desc.name, value);
  if (!st.ok()) {
    // Most likely the lease expired under us: one fresh lease, one more try.
    if (auto g = GrantLocked(); !g.ok()) return st;
    st = PutLocked(desc.name, value);
    if (!st.ok()) return st;
  }
  published_[desc.name] = value;
  return absl::OkStatus();
}

absl::StatusOr<SegmentDescriptor> EtcdMetadata::Lookup(std::string_view name) {
  std::string body = "{\"key\":";
  common::AppendJsonString(body, B64(Key(name)));
  body.push_back('}');
  auto r = Call("/v3/kv/range", body);
  if (!r.ok()) return r.status();
  simdjson::padded_string padded(*r);
  od::parser parser;
  od::document doc;
  od::object obj;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(obj)) {
    return absl::UnavailableError(common::StrCat("etcd: malformed range reply: ", *r));
  }
  od::array kvs;
  if (obj.find_field_unordered("kvs").get_array().get(kvs)) {
    return absl::NotFoundError(common::StrCat("etcd: no live segment named '", name, "'"));
  }
  for (auto kv : kvs) {
    std::string_view value;
    if (kv.find_field_unordered("value").get_string().get(value)) break;
    std::string json;
    if (!absl::Base64Unescape(absl::string_view(value.data(), value.size()), &json)) {
      return absl::InvalidArgumentError(common::StrCat("etcd: segment '", name, "': bad base64"));
    }
    return ParseSegmentJson(json);
  }
  return absl::NotFoundError(common::StrCat("etcd: no live segment named '", name, "'"));
}

absl::Status EtcdMetadata::Remove(std::string_view name) {
  {
    common::MutexLock lock(&mu_);
    published_.erase(std::string(name));
  }
  std::string body = "{\"key\":";
  common::AppendJsonString(body, B64(Key(name)));
  body.push_back('}');
  auto r = Call("/v3/kv/deleterange", body);
  return r.ok() ? absl::OkStatus() : r.status();
}

int64_t EtcdMetadata::LeaseIdForTest() {
  common::MutexLock lock(&mu_);
  return lease_;
}

void EtcdMetadata::KeepAlive() {
  const auto period = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(200), std::chrono::milliseconds(params_.lease_ttl_s * 1000 / 3));
  common::MutexLock lock(&mu_);
  while (!stop_) {
    cv_.WaitFor(&mu_, period);
    if (stop_) break;
    if (lease_ != 0) {
      // The HTTP call runs under mu_: Publish() waits at most one request time-out for it.
      auto r = Call("/v3/lease/keepalive", common::StrCat("{\"ID\":\"", lease_, "\"}"));
      if (!r.ok()) {
        spdlog::warn("transfer: etcd keep-alive failed: {}", r.status().message());
        continue;  // etcd may be back next period, with the lease still valid.
      }
      auto lease = ParseLease(*r, /*wrapped=*/true);
      if (lease.ok() && lease->ttl > 0) continue;
      spdlog::warn("transfer: etcd lease {} expired; re-publishing {} segments", lease_,
                   published_.size());
      lease_ = 0;
    }
    if (published_.empty()) continue;
    // Everything published under the old lease is gone: put it back under a new one.
    if (auto st = GrantLocked(); !st.ok()) continue;
    for (const auto& [name, value] : published_) {
      if (auto st = PutLocked(name, value); !st.ok()) {
        spdlog::warn("transfer: re-publishing '{}': {}", name, st.message());
      }
    }
  }
}

}  // namespace kvgate::transfer
