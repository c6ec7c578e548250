// File: router/config/cluster_section.cc
// The `cluster` section: where the replicas of one fleet meet (a Redis URL and a cluster name)
// and the timings of their sync. Its password's file or variable is read by ResolveConfig.
#include <string>

#include "common/strings.h"
#include "common/url.h"
#include "router/config/sections.h"

namespace kvgate::config {

void ReadCluster(YamlReader& r, const YAML::Node& n, ClusterConfig* c) {
  if (!r.ExpectMap(n, "cluster",
                   {"redis", "name", "replica", "password", "password_file", "password_env",
                    "heartbeat_ms", "peer_timeout_ms", "snapshot_interval_ms", "connect_timeout_ms",
                    "max_queue_bytes", "max_chain_blocks"})) {
    return;
  }
  if (r.String(n, "cluster", "redis", &c->redis) && !c->redis.empty()) {
    constexpr std::string_view kScheme = "redis://";
    std::string_view rest = c->redis;
    if (rest.substr(0, kScheme.size()) != kScheme) {
      r.Error(n["redis"], "cluster.redis", "expected redis://HOST:PORT");
    } else if (auto hp = common::ParseHostPort(rest.substr(kScheme.size())); !hp.ok()) {
      r.Error(n["redis"], "cluster.redis", hp.status().message());
    } else if (hp->second == 0) {
      r.Error(n["redis"], "cluster.redis", "needs a port");
    }
  }
  // The name is part of Redis channel and key names: keep it to what needs no quoting.
  if (r.String(n, "cluster", "name", &c->name) &&
      (c->name.empty() || c->name.size() > 64 ||
       c->name.find_first_not_of(
           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
           std::string::npos)) {
    r.Error(n["name"], "cluster.name", "1 to 64 letters, digits, '-', '_' or '.'");
  }
  if (r.String(n, "cluster", "replica", &c->replica) && c->replica.size() > 128) {
    r.Error(n["replica"], "cluster.replica", "at most 128 bytes");
  }
  r.String(n, "cluster", "password", &c->password);
  r.String(n, "cluster", "password_file", &c->password_file);
  r.String(n, "cluster", "password_env", &c->password_env);
  const int sources = (c->password.empty() ? 0 : 1) + (c->password_file.empty() ? 0 : 1) +
                      (c->password_env.empty() ? 0 : 1);
  if (sources > 1) r.Error(n, "cluster", "set one of password, password_file and password_env");
  if (!c->password_file.empty()) r.RecordPlace(n["password_file"], "cluster.password_file");
  if (!c->password_env.empty()) r.RecordPlace(n["password_env"], "cluster.password_env");
  r.Uint(n, "cluster", "heartbeat_ms", &c->heartbeat_ms, 10, 60'000);
  r.Uint(n, "cluster", "peer_timeout_ms", &c->peer_timeout_ms, 100, 3'600'000);
  r.Uint(n, "cluster", "snapshot_interval_ms", &c->snapshot_interval_ms, 100, 3'600'000);
  r.Uint(n, "cluster", "connect_timeout_ms", &c->connect_timeout_ms, 10, 60'000);
  r.Uint(n, "cluster", "max_queue_bytes", &c->max_queue_bytes, 1 << 16, uint64_t{1} << 34);
  r.Uint(n, "cluster", "max_chain_blocks", &c->max_chain_blocks, 1, 1u << 22);
  if (c->peer_timeout_ms <= c->heartbeat_ms) {
    r.Error(n, "cluster", "peer_timeout_ms must be longer than heartbeat_ms");
  }
}

}  // namespace kvgate::config
