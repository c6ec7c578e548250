#include "config/loader.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/types/span.h"
#include "common/logging.h"
#include "common/strings.h"
#include "config/secret.h"
#include "config/sections.h"
#include "config/yaml_reader.h"
#include "kvindex/prefix_index.h"
#include "kvindex/tokenizer.h"
#include "router/pd/pd_bodies.h"
#include "router/routing/policy_registry.h"
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

void ReadPrecise(YamlReader& r, const YAML::Node& n, PreciseConfig* c) {
  const std::string p = "routing.precise";
  if (!r.ExpectMap(n, p,
                   {"tokenizer", "model_tokenizers", "probe", "probe_timeout_ms",
                    "speculative_ttl_ms", "silence_timeout_ms", "replay_timeout_ms", "media"})) {
    return;
  }
  auto check_tokenizer = [&](const YAML::Node& node, const std::string& path,
                             const std::string& name) {
    auto tokenizer = kvindex::MakeTokenizer(name);
    if (!tokenizer.ok()) r.Error(node, path, tokenizer.status().message());
    return tokenizer.ok();
  };
  if (r.String(n, p, "tokenizer", &c->tokenizer)) {
    check_tokenizer(n["tokenizer"], p + ".tokenizer", c->tokenizer);
  }
  auto read_map = [&](const char* key, auto&& check, auto* out) {
    const YAML::Node m = n[key];
    if (!m.IsDefined() || m.IsNull()) return;
    const std::string mp = YamlReader::Join(p, key);
    if (!m.IsMap()) {
      r.Error(m, mp, "must be a mapping");
      return;
    }
    for (const auto& kv : m) {
      const std::string name = kv.first.Scalar();
      const std::string path = YamlReader::Join(mp, name);
      if (!kv.second.IsScalar()) {
        r.Error(kv.second, path, "expected a string");
      } else if (check(kv.second, path, kv.second.Scalar())) {
        out->emplace_back(name, kv.second.Scalar());
      }
    }
  };
  read_map("model_tokenizers", check_tokenizer, &c->model_tokenizers);
  read_map(
      "media",
      [&](const YAML::Node& node, const std::string& path, const std::string& tier) {
        if (tier == "gpu" || tier == "host" || tier == "store") return true;
        r.Error(node, path, common::StrCat("must be gpu, host or store, got '", tier, "'"));
        return false;
      },
      &c->media);
  r.Bool(n, p, "probe", &c->probe);
  r.Uint(n, p, "probe_timeout_ms", &c->probe_timeout_ms, 10);
  r.Uint(n, p, "speculative_ttl_ms", &c->speculative_ttl_ms);
  r.Uint(n, p, "silence_timeout_ms", &c->silence_timeout_ms);
  r.Uint(n, p, "replay_timeout_ms", &c->replay_timeout_ms, 10);
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

namespace {

bool CheckPdProtocol(YamlReader& r, const YAML::Node& n, const std::string& path,
                     const std::string& name, bool allow_none) {
  if (router::pd::PdProtocolFromName(name) || (allow_none && name == "none")) return true;
  r.Error(n, path,
          common::StrCat("unknown P/D protocol '", name,
                         "' (expected vllm-nixl, vllm-mooncake, vllm-p2p-nccl or sglang-bootstrap",
                         allow_none ? ", or none" : "", ")"));
  return false;
}

void ReadPd(YamlReader& r, const YAML::Node& n, PdConfig* c) {
  const std::string p = "pd";
  if (!r.ExpectMap(n, p,
                   {"protocol", "models", "skip_prefill_below_tokens", "fallback_to_mixed",
                    "release_timeout_ms"})) {
    return;
  }
  if (r.String(n, p, "protocol", &c->protocol) && !c->protocol.empty()) {
    CheckPdProtocol(r, n["protocol"], "pd.protocol", c->protocol, false);
  }
  if (const YAML::Node m = n["models"]; m.IsDefined() && !m.IsNull()) {
    if (!m.IsMap()) {
      r.Error(m, "pd.models", "must map model names to P/D protocols");
    } else {
      for (const auto& kv : m) {
        const std::string path = common::StrCat("pd.models.", kv.first.Scalar());
        if (!kv.second.IsScalar()) {
          r.Error(kv.second, path, "expected a P/D protocol name or none");
        } else if (CheckPdProtocol(r, kv.second, path, kv.second.Scalar(), true)) {
          c->model_protocols.emplace_back(kv.first.Scalar(), kv.second.Scalar());
        }
      }
    }
  }
  r.Uint(n, p, "skip_prefill_below_tokens", &c->skip_prefill_below_tokens);
  r.Bool(n, p, "fallback_to_mixed", &c->fallback_to_mixed);
  r.Uint(n, p, "release_timeout_ms", &c->release_timeout_ms, 1);
}

bool CheckPolicy(YamlReader& r, const YAML::Node& n, const std::string& path,
                 const std::string& name) {
  if (router::FindPolicy(name) != nullptr) return true;
  r.Error(
      n, path,
      common::StrCat("unknown policy '", name, "' (expected one of: ", router::PolicyNames(), ")"));
  return false;
}

void ReadRouting(YamlReader& r, const YAML::Node& n, RoutingConfig* c) {
  const std::string p = "routing";
  if (!r.ExpectMap(n, p,
                   {"policy", "model_policies", "block_tokens", "index_memory_bytes",
                    "engine_metrics_interval_ms", "cache_aware", "cost", "weighted",
                    "consistent_hash", "kvaware", "precise", "session_keys", "responses"})) {
    return;
  }
  if (const YAML::Node k = n["session_keys"]; k.IsDefined() && !k.IsNull()) {
    const std::string q = "routing.session_keys";
    if (!k.IsSequence()) {
      r.Error(k, q, "must be a list of header names and body fields");
    } else {
      c->session_keys.clear();
      for (const auto& e : k) {
        if (!e.IsScalar() || e.Scalar().empty()) {
          r.Error(e, q, "each entry must be a header name or a body field");
          continue;
        }
        std::string name = e.Scalar();
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        if (std::find(c->session_keys.begin(), c->session_keys.end(), name) !=
            c->session_keys.end()) {
          r.Error(e, q, common::StrCat("'", name, "' is listed twice"));
          continue;
        }
        c->session_keys.push_back(std::move(name));
      }
    }
  }
  if (const YAML::Node s = n["responses"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.responses";
    if (r.ExpectMap(s, q, {"max_pins", "pin_ttl_s"})) {
      r.Uint(s, q, "max_pins", &c->responses.max_pins, 1, 100'000'000);
      r.Uint(s, q, "pin_ttl_s", &c->responses.pin_ttl_s, 1, 365 * 86'400);
    }
  }
  if (r.String(n, p, "policy", &c->policy))
    CheckPolicy(r, n["policy"], "routing.policy", c->policy);
  if (const YAML::Node m = n["model_policies"]; m.IsDefined() && !m.IsNull()) {
    if (!m.IsMap()) {
      r.Error(m, "routing.model_policies", "must map model names to policy names");
    } else {
      for (const auto& kv : m) {
        const std::string model = kv.first.Scalar();
        const std::string path = common::StrCat("routing.model_policies.", model);
        if (!kv.second.IsScalar()) {
          r.Error(kv.second, path, "expected a policy name");
        } else if (CheckPolicy(r, kv.second, path, kv.second.Scalar())) {
          c->model_policies.emplace_back(model, kv.second.Scalar());
        }
      }
    }
  }
  r.Uint(n, p, "block_tokens", &c->block_tokens, 1, 4096);
  r.Uint(n, p, "index_memory_bytes", &c->index_memory_bytes, 1 << 20);
  r.Uint(n, p, "engine_metrics_interval_ms", &c->engine_metrics_interval_ms);
  if (const YAML::Node s = n["cache_aware"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.cache_aware";
    if (r.ExpectMap(s, q, {"cache_threshold", "balance_abs_threshold", "balance_rel_threshold"})) {
      r.Double(s, q, "cache_threshold", &c->cache_aware.cache_threshold, 0, 1);
      r.Uint(s, q, "balance_abs_threshold", &c->cache_aware.balance_abs_threshold);
      r.Double(s, q, "balance_rel_threshold", &c->cache_aware.balance_rel_threshold, 1, 1e6);
    }
  }
  if (const YAML::Node s = n["cost"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.cost";
    if (r.ExpectMap(s, q,
                    {"overlap_score_credit", "prefill_load_scale", "host_cache_hit_weight",
                     "store_cache_hit_weight"})) {
      r.Double(s, q, "overlap_score_credit", &c->cost.overlap_score_credit, 0, 1e6);
      r.Double(s, q, "prefill_load_scale", &c->cost.prefill_load_scale, 0, 1e6);
      r.Double(s, q, "host_cache_hit_weight", &c->cost.host_cache_hit_weight, 0, 1);
      r.Double(s, q, "store_cache_hit_weight", &c->cost.store_cache_hit_weight, 0, 1);
    }
  }
  if (const YAML::Node s = n["weighted"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.weighted";
    if (r.ExpectMap(s, q,
                    {"prefix_weight", "queue_weight", "kv_utilization_weight", "host_tier_weight",
                     "store_tier_weight"})) {
      r.Double(s, q, "prefix_weight", &c->weighted.prefix_weight, 0, 1e6);
      r.Double(s, q, "queue_weight", &c->weighted.queue_weight, 0, 1e6);
      r.Double(s, q, "kv_utilization_weight", &c->weighted.kv_utilization_weight, 0, 1e6);
      r.Double(s, q, "host_tier_weight", &c->weighted.host_tier_weight, 0, 1);
      r.Double(s, q, "store_tier_weight", &c->weighted.store_tier_weight, 0, 1);
    }
  }
  if (const YAML::Node s = n["consistent_hash"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.consistent_hash";
    if (r.ExpectMap(s, q, {"virtual_nodes", "bounded_load_factor"})) {
      r.Uint(s, q, "virtual_nodes", &c->consistent_hash.virtual_nodes, 1, 10000);
      r.Double(s, q, "bounded_load_factor", &c->consistent_hash.bounded_load_factor, 0, 1e3);
    }
  }
  if (const YAML::Node s = n["kvaware"]; s.IsDefined() && !s.IsNull()) {
    const std::string q = "routing.kvaware";
    KvAwarePolicyConfig& k = c->kvaware;
    if (r.ExpectMap(s, q,
                    {"min_match_tokens", "prefill_tokens_per_second", "host_tokens_per_second",
                     "store_tokens_per_second", "decode_interference_seconds", "spill_bound",
                     "affinity_margin_seconds", "balance_weight", "balance_half_life_ms",
                     "kv_full_wait_seconds"})) {
      r.Uint(s, q, "min_match_tokens", &k.min_match_tokens);
      r.Double(s, q, "prefill_tokens_per_second", &k.prefill_tokens_per_second, 1, 1e9);
      r.Double(s, q, "host_tokens_per_second", &k.host_tokens_per_second, 1, 1e12);
      r.Double(s, q, "store_tokens_per_second", &k.store_tokens_per_second, 1, 1e12);
      r.Double(s, q, "decode_interference_seconds", &k.decode_interference_seconds, 0, 10);
      r.Uint(s, q, "spill_bound", &k.spill_bound, 0, 1'000'000);
      r.Double(s, q, "affinity_margin_seconds", &k.affinity_margin_seconds, 0, 3600);
      r.Double(s, q, "balance_weight", &k.balance_weight, 0, 1e3);
      r.Uint(s, q, "balance_half_life_ms", &k.balance_half_life_ms, 1);
      r.Double(s, q, "kv_full_wait_seconds", &k.kv_full_wait_seconds, 0, 3600);
    }
  }
  if (const YAML::Node s = n["precise"]; s.IsDefined() && !s.IsNull())
    ReadPrecise(r, s, &c->precise);
}

}  // namespace

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
