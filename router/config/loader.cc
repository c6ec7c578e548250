#include "router/config/loader.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/types/span.h"
#include "common/logging.h"
#include "common/strings.h"
#include "kvindex/prefix_index.h"
#include "router/config/secret.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
#include "router/policies/policy_registry.h"
#include "yaml-cpp/yaml.h"

namespace kvgate::config {
namespace {

bool IsZmqEndpoint(std::string_view e) {
  for (std::string_view scheme : {"tcp://", "ipc://", "inproc://"}) {
    if (e.substr(0, scheme.size()) == scheme && e.size() > scheme.size()) return true;
  }
  return false;
}

void ReadKvEvents(YamlReader& r, const YAML::Node& n, const std::string& path, KvEventsConfig* k) {
  if (!r.ExpectMap(n, path,
                   {"endpoint", "replay_endpoint", "topic", "block_size", "bind", "hash_mode"})) {
    return;
  }
  if (!r.String(n, path, "endpoint", &k->endpoint)) {
    r.Error(n, YamlReader::Join(path, "endpoint"), "is required");
  } else if (!IsZmqEndpoint(k->endpoint)) {
    r.Error(n["endpoint"], YamlReader::Join(path, "endpoint"),
            common::StrCat("expected tcp://HOST:PORT, ipc://PATH or inproc://NAME, got '",
                           k->endpoint, "'"));
  }
  if (r.String(n, path, "replay_endpoint", &k->replay_endpoint) && !k->replay_endpoint.empty() &&
      !IsZmqEndpoint(k->replay_endpoint)) {
    r.Error(n["replay_endpoint"], YamlReader::Join(path, "replay_endpoint"),
            common::StrCat("expected tcp://HOST:PORT, ipc://PATH or inproc://NAME, got '",
                           k->replay_endpoint, "'"));
  }
  r.String(n, path, "topic", &k->topic);
  r.Uint(n, path, "block_size", &k->block_size, 1, 4096);
  r.Bool(n, path, "bind", &k->bind);
  if (r.String(n, path, "hash_mode", &k->hash_mode) && k->hash_mode != "tokens") {
    r.Error(n["hash_mode"], YamlReader::Join(path, "hash_mode"),
            common::StrCat("must be 'tokens' (kvgate re-hashes the events' token ids; reproducing "
                           "the engine's own hash is not supported), got '",
                           k->hash_mode, "'"));
  }
}

}  // namespace

void ReadWorker(YamlReader& r, const YAML::Node& node, const std::string& path, WorkerConfig* w,
                std::set<std::string>* seen, absl::Span<const std::string_view> extra) {
  std::vector<std::string_view> keys = {
      "models",    "role",           "dp_size",    "weight", "kv_capacity_tokens",
      "kv_events", "bootstrap_port", "zmq_address"};
  // What a prefill's kv_transfer_params may name (issue 27; ReadTransferPeer).
  keys.insert(keys.end(), {"kv_transfer_hosts", "kv_transfer_ports", "kv_transfer_engine_id"});
  if (seen == nullptr) {
    // Per-worker addresses have no place in a template (each found worker has its own).
    std::erase_if(keys, [](std::string_view k) {
      return k == "kv_events" || k == "zmq_address" || k == "kv_transfer_hosts" ||
             k == "kv_transfer_engine_id";
    });
  } else {
    keys.push_back("url");
  }
  keys.insert(keys.end(), extra.begin(), extra.end());
  if (!r.ExpectMap(node, path, keys)) return;
  std::string url;
  if (seen == nullptr) {
    // The url comes from discovery.
  } else if (!r.String(node, path, "url", &url)) {
    r.Error(node, YamlReader::Join(path, "url"), "is required");
  } else {
    auto parsed = common::ParseHttpUrl(url, /*allow_https=*/true);
    if (!parsed.ok()) {
      r.Error(node["url"], YamlReader::Join(path, "url"), parsed.status().message());
    } else {
      w->url = *parsed;
      if (!seen->insert(w->url.ToString()).second) {
        r.Error(node["url"], YamlReader::Join(path, "url"),
                common::StrCat("duplicate worker '", w->url.ToString(), "'"));
      }
    }
  }
  const YAML::Node models = node["models"];
  if (models.IsDefined() && !models.IsNull()) {
    if (models.IsScalar()) {
      w->models.push_back(models.Scalar());
    } else if (models.IsSequence()) {
      for (const auto& m : models) {
        if (!m.IsScalar() || m.Scalar().empty()) {
          r.Error(m, YamlReader::Join(path, "models"), "entries must be non-empty strings");
        } else {
          w->models.push_back(m.Scalar());
        }
      }
    } else {
      r.Error(models, YamlReader::Join(path, "models"), "expected a list of model names");
    }
  }
  std::string role;
  if (r.String(node, path, "role", &role)) {
    if (role == "mixed") {
      w->role = WorkerRole::kMixed;
    } else if (role == "prefill") {
      w->role = WorkerRole::kPrefill;
    } else if (role == "decode") {
      w->role = WorkerRole::kDecode;
    } else {
      r.Error(node["role"], YamlReader::Join(path, "role"),
              common::StrCat("must be mixed, prefill or decode, got '", role, "'"));
    }
  }
  r.Uint(node, path, "dp_size", &w->dp_size, 1, 1024);
  r.Double(node, path, "weight", &w->weight, 0.0, 1e6);
  r.Uint(node, path, "kv_capacity_tokens", &w->kv_capacity_tokens);
  r.Uint(node, path, "bootstrap_port", &w->bootstrap_port, 1, 65535);
  if (r.String(node, path, "zmq_address", &w->zmq_address) && !w->zmq_address.empty()) {
    if (auto hp = common::ParseHostPort(w->zmq_address); !hp.ok()) {
      r.Error(node["zmq_address"], YamlReader::Join(path, "zmq_address"), hp.status().message());
    }
  }
  if (const YAML::Node e = node["kv_events"]; e.IsDefined() && !e.IsNull()) {
    ReadKvEvents(r, e, YamlReader::Join(path, "kv_events"), &w->kv_events.emplace());
  }
  ReadTransferPeer(r, node, path, w);
}

const char* WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kMixed:
      break;
  }
  return "mixed";
}

absl::StatusOr<Config> LoadConfigFromString(std::string_view yaml, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        common::StrCat(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  Config c;
  if (root.IsNull()) return c;  // an empty file means all defaults
  YamlReader r(source);
  try {
    if (!r.ExpectMap(root, "",
                     {"listen",
                      "tls",
                      "threads",
                      "log_level",
                      "drain_timeout_ms",
                      "drain_delay_ms",
                      "models_refresh_interval_ms",
                      "limits",
                      "upstream",
                      "retry",
                      "health_check",
                      "circuit_breaker",
                      "routing",
                      "pd",
                      "auth",
                      "admin",
                      "access_log",
                      "workers",
                      "discovery",
                      "stores"})) {
      return absl::InvalidArgumentError(common::StrJoin(r.errors(), "\n"));
    }
    std::string listen;
    if (r.String(root, "", "listen", &listen)) {
      auto hp = common::ParseHostPort(listen);
      if (!hp.ok()) {
        r.Error(root["listen"], "listen", hp.status().message());
      } else {
        c.listen_host = hp->first;
        c.listen_port = hp->second;
      }
    }
    if (const YAML::Node n = root["tls"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "tls", {"cert_file", "key_file", "client_ca_file"})) {
        r.String(n, "tls", "cert_file", &c.tls.cert_file);
        r.String(n, "tls", "key_file", &c.tls.key_file);
        r.String(n, "tls", "client_ca_file", &c.tls.client_ca_file);
      }
    }
    r.Uint(root, "", "threads", &c.threads, 0, 1024);
    if (r.String(root, "", "log_level", &c.log_level) && !common::IsValidLogLevel(c.log_level)) {
      r.Error(root["log_level"], "log_level",
              common::StrCat("unknown level '", c.log_level,
                             "' (expected trace, debug, info, warn, error or off)"));
    }
    r.Uint(root, "", "drain_timeout_ms", &c.drain_timeout_ms);
    r.Uint(root, "", "drain_delay_ms", &c.drain_delay_ms, 0, 600'000);
    r.Uint(root, "", "models_refresh_interval_ms", &c.models_refresh_interval_ms, 100);

    if (const YAML::Node n = root["limits"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(
              n, "limits",
              {"max_header_bytes", "max_body_bytes", "idle_timeout_ms", "read_timeout_ms",
               "write_timeout_ms", "tls_handshake_timeout_ms", "max_connections",
               "max_connections_per_client", "health_reserve", "rate", "max_concurrent_requests",
               "queue_size", "queue_timeout_ms", "queue_share_per_client"})) {
        r.Uint(n, "limits", "max_header_bytes", &c.limits.max_header_bytes, 1024);
        r.Uint(n, "limits", "max_body_bytes", &c.limits.max_body_bytes, 1);
        r.Uint(n, "limits", "idle_timeout_ms", &c.limits.idle_timeout_ms, 1);
        r.Uint(n, "limits", "read_timeout_ms", &c.limits.read_timeout_ms, 1);
        r.Uint(n, "limits", "write_timeout_ms", &c.limits.write_timeout_ms, 1);
        r.Uint(n, "limits", "tls_handshake_timeout_ms", &c.limits.tls_handshake_timeout_ms, 1);
        r.Uint(n, "limits", "max_connections", &c.limits.max_connections, 1);
        r.Uint(n, "limits", "max_connections_per_client", &c.limits.max_connections_per_client);
        r.Uint(n, "limits", "health_reserve", &c.limits.health_reserve, 0, 10'000);
        if (const YAML::Node rate = n["rate"]; rate.IsDefined() && !rate.IsNull()) {
          ReadRate(r, rate, "limits.rate", &c.limits.rate);
        }
        r.Uint(n, "limits", "max_concurrent_requests", &c.limits.max_concurrent_requests);
        r.Uint(n, "limits", "queue_size", &c.limits.queue_size);
        r.Uint(n, "limits", "queue_timeout_ms", &c.limits.queue_timeout_ms, 1);
        r.Double(n, "limits", "queue_share_per_client", &c.limits.queue_share_per_client, 0.001,
                 1.0);
      }
    }
    if (const YAML::Node n = root["upstream"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "upstream",
                      {"connect_timeout_ms", "response_timeout_ms", "stream_idle_timeout_ms",
                       "max_idle_per_worker", "tls", "api_key_file", "api_key_env"})) {
        r.Uint(n, "upstream", "connect_timeout_ms", &c.upstream.connect_timeout_ms, 1);
        r.Uint(n, "upstream", "response_timeout_ms", &c.upstream.response_timeout_ms, 1);
        r.Uint(n, "upstream", "stream_idle_timeout_ms", &c.upstream.stream_idle_timeout_ms, 1);
        r.Uint(n, "upstream", "max_idle_per_worker", &c.upstream.max_idle_per_worker);
        r.String(n, "upstream", "api_key_file", &c.upstream.api_key_file);
        r.String(n, "upstream", "api_key_env", &c.upstream.api_key_env);
        if (!c.upstream.api_key_file.empty() && !c.upstream.api_key_env.empty()) {
          r.Error(n["api_key_env"], "upstream.api_key_env",
                  "set api_key_file or api_key_env, not both");
        } else if (auto key = ReadSecret(c.upstream.api_key_file, c.upstream.api_key_env,
                                         "the worker API key");
                   !key.ok()) {
          r.Error(n, "upstream", key.status().message());
        } else {
          c.upstream.api_key = *std::move(key);
        }
        if (const YAML::Node t = n["tls"]; t.IsDefined() && !t.IsNull()) {
          if (r.ExpectMap(t, "upstream.tls", {"ca_file", "cert_file", "key_file"})) {
            r.String(t, "upstream.tls", "ca_file", &c.upstream.tls.ca_file);
            r.String(t, "upstream.tls", "cert_file", &c.upstream.tls.cert_file);
            r.String(t, "upstream.tls", "key_file", &c.upstream.tls.key_file);
          }
        }
      }
    }
    if (const YAML::Node n = root["retry"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "retry",
                      {"max_attempts", "backoff_base_ms", "backoff_max_ms", "jitter"})) {
        r.Uint(n, "retry", "max_attempts", &c.retry.max_attempts, 1, 16);
        r.Uint(n, "retry", "backoff_base_ms", &c.retry.backoff_base_ms);
        r.Uint(n, "retry", "backoff_max_ms", &c.retry.backoff_max_ms);
        r.Double(n, "retry", "jitter", &c.retry.jitter, 0.0, 1.0);
      }
    }
    if (const YAML::Node n = root["health_check"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "health_check",
                      {"enabled", "path", "interval_ms", "timeout_ms", "unhealthy_threshold",
                       "healthy_threshold"})) {
        r.Bool(n, "health_check", "enabled", &c.health_check.enabled);
        if (r.String(n, "health_check", "path", &c.health_check.path) &&
            (c.health_check.path.empty() || c.health_check.path[0] != '/')) {
          r.Error(n["path"], "health_check.path", "must start with '/'");
        }
        r.Uint(n, "health_check", "interval_ms", &c.health_check.interval_ms, 10);
        r.Uint(n, "health_check", "timeout_ms", &c.health_check.timeout_ms, 1);
        r.Uint(n, "health_check", "unhealthy_threshold", &c.health_check.unhealthy_threshold, 1);
        r.Uint(n, "health_check", "healthy_threshold", &c.health_check.healthy_threshold, 1);
      }
    }
    if (const YAML::Node n = root["circuit_breaker"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "circuit_breaker", {"consecutive_failures", "open_ms"})) {
        r.Uint(n, "circuit_breaker", "consecutive_failures",
               &c.circuit_breaker.consecutive_failures, 1);
        r.Uint(n, "circuit_breaker", "open_ms", &c.circuit_breaker.open_ms, 1);
      }
    }
    if (const YAML::Node n = root["routing"]; n.IsDefined() && !n.IsNull()) {
      ReadRouting(r, n, &c.routing);
    }
    if (const YAML::Node n = root["pd"]; n.IsDefined() && !n.IsNull()) ReadPd(r, n, &c.pd);
    if (const YAML::Node n = root["discovery"]; n.IsDefined() && !n.IsNull()) {
      ReadDiscovery(r, n, &c.discovery);
    }
    if (const YAML::Node n = root["auth"]; n.IsDefined() && !n.IsNull()) {
      ReadAuth(r, n, &c.auth);
    }
    if (const YAML::Node n = root["admin"]; n.IsDefined() && !n.IsNull()) {
      ReadAdmin(r, n, &c.admin);
    }
    if (const YAML::Node n = root["access_log"]; n.IsDefined() && !n.IsNull()) {
      if (r.ExpectMap(n, "access_log", {"enabled", "path"})) {
        r.Bool(n, "access_log", "enabled", &c.access_log.enabled);
        r.String(n, "access_log", "path", &c.access_log.path);
      }
    }
    if (const YAML::Node n = root["workers"]; n.IsDefined() && !n.IsNull()) {
      if (!n.IsSequence()) {
        r.Error(n, "workers", "must be a list");
      } else {
        std::set<std::string> seen;
        for (size_t i = 0; i < n.size(); ++i) {
          WorkerConfig w;
          ReadWorker(r, n[i], common::StrCat("workers[", i, "]"), &w, &seen);
          c.workers.push_back(std::move(w));
        }
      }
    }
    if (const YAML::Node n = root["stores"]; n.IsDefined() && !n.IsNull()) {
      if (!n.IsSequence()) {
        r.Error(n, "stores", "must be a list");
      } else if (n.size() > 16) {
        r.Error(n, "stores", "at most 16 stores");
      } else {
        std::set<std::string> names;
        for (size_t i = 0; i < n.size(); ++i) {
          const std::string path = common::StrCat("stores[", i, "]");
          StoreConfig st;
          if (!r.ExpectMap(n[i], path, {"name", "model", "kv_events", "address"})) continue;
          if (!r.String(n[i], path, "name", &st.name) || st.name.empty()) {
            r.Error(n[i], YamlReader::Join(path, "name"), "is required");
          } else if (!names.insert(st.name).second) {
            r.Error(n[i]["name"], YamlReader::Join(path, "name"),
                    common::StrCat("duplicate store '", st.name, "'"));
          }
          if (!r.String(n[i], path, "model", &st.model) || st.model.empty())
            r.Error(n[i], YamlReader::Join(path, "model"), "is required (the model of its blocks)");
          if (std::string address; r.String(n[i], path, "address", &address)) {
            // HOST:PORT or http://HOST:PORT.
            auto url = common::ParseHttpUrl(address.find("://") == std::string::npos
                                                ? common::StrCat("http://", address)
                                                : address);
            if (url.ok()) {
              st.address = std::move(*url);
            } else {
              r.Error(n[i]["address"], YamlReader::Join(path, "address"), url.status().message());
            }
          }
          if (const YAML::Node e = n[i]["kv_events"]; e.IsDefined() && !e.IsNull()) {
            ReadKvEvents(r, e, YamlReader::Join(path, "kv_events"), &st.kv_events);
          } else {
            r.Error(n[i], YamlReader::Join(path, "kv_events"), "is required");
          }
          c.stores.push_back(std::move(st));
        }
      }
    }
  } catch (const YAML::Exception& e) {
    r.errors().push_back(common::StrCat(source, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (!r.errors().empty()) {
    return absl::InvalidArgumentError(common::StrJoin(r.errors(), "\n"));
  }
  return c;
}

absl::StatusOr<Config> LoadConfigFromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(common::StrCat(path, ": cannot read config file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadConfigFromString(ss.str(), path);
}

absl::Status ValidateConfig(const Config& c) {
  std::vector<std::string> errors;
  std::set<std::string> seen;
  for (size_t i = 0; i < c.workers.size(); ++i) {
    if (!seen.insert(c.workers[i].url.ToString()).second) {
      errors.push_back(common::StrCat("workers[", i, "].url: duplicate worker '",
                                      c.workers[i].url.ToString(), "'"));
    }
  }
  if (router::FindPolicy(c.routing.policy) == nullptr) {
    errors.push_back(common::StrCat("routing.policy: unknown policy '", c.routing.policy,
                                    "' (expected one of: ", router::PolicyNames(), ")"));
  }
  // The prefix indexes have a fixed number of holders: a worker beyond them would be routed
  // without cache data, so it is refused here rather than discovered in production.
  const size_t max_holders = kvindex::PrefixIndex::kMaxHolders;
  size_t ranks = 0;
  for (const auto& w : c.workers) {
    if (w.kv_events) ranks += w.dp_size;
  }
  if (c.workers.size() > max_holders) {
    errors.push_back(common::StrCat("workers: ", c.workers.size(),
                                    " workers configured; the "
                                    "prefix index holds at most ",
                                    max_holders));
  }
  if (ranks + c.stores.size() > max_holders) {
    errors.push_back(common::StrCat("workers: the workers with kv_events have ", ranks,
                                    " DP ranks in all and there are ", c.stores.size(),
                                    " stores; the precise index holds at most ", max_holders));
  }
  if (!common::IsValidLogLevel(c.log_level)) {
    errors.push_back(common::StrCat("log_level: unknown level '", c.log_level, "'"));
  }
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    errors.push_back("tls: cert_file and key_file go together");
  }
  if (!c.tls.client_ca_file.empty() && c.tls.cert_file.empty()) {
    errors.push_back("tls.client_ca_file: needs tls.cert_file and tls.key_file");
  }
  if (c.upstream.tls.cert_file.empty() != c.upstream.tls.key_file.empty()) {
    errors.push_back("upstream.tls: cert_file and key_file go together");
  }
  if (c.retry.backoff_max_ms < c.retry.backoff_base_ms) {
    errors.push_back("retry.backoff_max_ms: must be >= retry.backoff_base_ms");
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(common::StrJoin(errors, "\n"));
}

}  // namespace kvgate::config
