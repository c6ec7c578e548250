#include "transfer/metadata/segment_metadata.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "common/url.h"
#include "transfer/metadata/etcd_metadata.h"
#include "transfer/metadata/static_metadata.h"

namespace kvgate::transfer {
namespace {

absl::Status BadUri(std::string_view uri, std::string_view why) {
  return absl::InvalidArgumentError(
      common::StrCat("metadata URI '", uri, "': ", why,
                     " (expected file:/path or etcd://host:port[,host:port][/prefix][?ttl_s=N])"));
}

absl::StatusOr<SegmentMetadataPtr> OpenEtcd(std::string_view uri, std::string_view rest) {
  EtcdParams params;
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view hosts = rest;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hosts = rest.substr(0, slash);
    std::string_view prefix = rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    if (!prefix.empty()) params.prefix = std::string(prefix);
  }
  for (absl::string_view hp : absl::StrSplit(absl::string_view(hosts.data(), hosts.size()), ',')) {
    auto parsed = common::ParseHostPort(std::string_view(hp.data(), hp.size()));
    if (!parsed.ok() || parsed->second == 0) return BadUri(uri, "bad host:port");
    params.endpoints.push_back(*parsed);
  }
  if (params.endpoints.empty()) return BadUri(uri, "no etcd endpoint");
  for (absl::string_view kv :
       absl::StrSplit(absl::string_view(query.data(), query.size()), '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    uint64_t v = 0;
    if (eq == absl::string_view::npos ||
        !common::ParseUint64(std::string_view(kv.data() + eq + 1, kv.size() - eq - 1), &v) ||
        v == 0 || v > 1000000) {
      return BadUri(uri, "bad query parameter");
    }
    const absl::string_view key = kv.substr(0, eq);
    if (key == "ttl_s") {
      params.lease_ttl_s = static_cast<uint32_t>(v);
    } else if (key == "timeout_ms") {
      params.request_timeout_ms = static_cast<uint32_t>(v);
    } else {
      return BadUri(uri, "unknown query parameter");
    }
  }
  return SegmentMetadataPtr(std::make_unique<EtcdMetadata>(std::move(params)));
}

}  // namespace

absl::StatusOr<SegmentMetadataPtr> OpenSegmentMetadata(std::string_view uri) {
  if (absl::StartsWith(absl::string_view(uri.data(), uri.size()), "file:")) {
    std::string_view path = uri.substr(5);
    if (path.substr(0, 2) == "//") path.remove_prefix(2);  // file:///abs/path
    if (path.empty() || path.front() != '/') return BadUri(uri, "the path must be absolute");
    return SegmentMetadataPtr(std::make_unique<StaticMetadata>(std::string(path)));
  }
  if (absl::StartsWith(absl::string_view(uri.data(), uri.size()), "etcd://")) {
    return OpenEtcd(uri, uri.substr(7));
  }
  return BadUri(uri, "unknown scheme");
}

}  // namespace kvgate::transfer
