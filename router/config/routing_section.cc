// File: router/config/routing_section.cc
// `routing` (the policy and its settings, precise mode) and `pd` (disaggregated prefill and
// decode): the loader's largest sections. Tokenizers are checked by name here, loaded by
// ResolveConfig.
#include <algorithm>
#include <cctype>
#include <string>

#include "common/strings.h"
#include "kvindex/prefix_index.h"
#include "router/config/sections.h"
#include "router/pd/pd_bodies.h"
#include "router/policies/policy_registry.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::config {
namespace {

void ReadPrecise(YamlReader& r, const YAML::Node& n, PreciseConfig* c) {
  const std::string p = "routing.precise";
  if (!r.ExpectMap(
          n, p,
          {"tokenizer", "model_tokenizers", "probe", "probe_timeout_ms", "speculative_ttl_ms",
           "silence_timeout_ms", "reverify_interval_ms", "replay_timeout_ms", "media"})) {
    return;
  }
  // The name only: ResolveConfig loads the directory (at the place recorded here).
  auto check_tokenizer = [&](const YAML::Node& node, const std::string& path,
                             const std::string& name) {
    if (absl::Status s = tokenizer::CheckTokenizerName(name); !s.ok()) {
      r.Error(node, path, s.message());
      return false;
    }
    r.RecordPlace(node, path);
    return true;
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
    r.NoDuplicateKeys(m, mp);
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
  r.Uint(n, p, "reverify_interval_ms", &c->reverify_interval_ms);
  r.Uint(n, p, "replay_timeout_ms", &c->replay_timeout_ms, 10);
}

bool CheckPdProtocol(YamlReader& r, const YAML::Node& n, const std::string& path,
                     const std::string& name, bool allow_none) {
  if (router::pd::PdProtocolFromName(name) || (allow_none && name == "none")) return true;
  r.Error(n, path,
          common::StrCat("unknown P/D protocol '", name,
                         "' (expected vllm-nixl, vllm-mooncake, vllm-p2p-nccl or sglang-bootstrap",
                         allow_none ? ", or none" : "", ")"));
  return false;
}

}  // namespace

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
      r.NoDuplicateKeys(m, "pd.models");
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

namespace {

bool CheckPolicy(YamlReader& r, const YAML::Node& n, const std::string& path,
                 const std::string& name) {
  if (router::FindPolicy(name) != nullptr) return true;
  r.Error(
      n, path,
      common::StrCat("unknown policy '", name, "' (expected one of: ", router::PolicyNames(), ")"));
  return false;
}

}  // namespace

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
      r.NoDuplicateKeys(m, "routing.model_policies");
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
                    {"min_match_tokens", "prefill_tokens_per_second", "prefill_context_factor",
                     "host_tokens_per_second", "store_tokens_per_second",
                     "decode_interference_seconds", "spill_bound", "affinity_margin_seconds",
                     "load_delay_weight", "balance_weight", "balance_half_life_ms",
                     "kv_full_wait_seconds", "open_lanes", "lane_weight", "prediction_header"})) {
      r.Uint(s, q, "min_match_tokens", &k.min_match_tokens);
      r.Double(s, q, "prefill_tokens_per_second", &k.prefill_tokens_per_second, 1, 1e9);
      r.Double(s, q, "prefill_context_factor", &k.prefill_context_factor, 0, 1e-2);
      r.Double(s, q, "host_tokens_per_second", &k.host_tokens_per_second, 1, 1e12);
      r.Double(s, q, "store_tokens_per_second", &k.store_tokens_per_second, 1, 1e12);
      r.Double(s, q, "decode_interference_seconds", &k.decode_interference_seconds, 0, 10);
      r.Uint(s, q, "spill_bound", &k.spill_bound, 0, 1'000'000);
      r.Double(s, q, "affinity_margin_seconds", &k.affinity_margin_seconds, 0, 3600);
      r.Double(s, q, "load_delay_weight", &k.load_delay_weight, 0, 100);
      r.Double(s, q, "balance_weight", &k.balance_weight, 0, 1e3);
      r.Uint(s, q, "balance_half_life_ms", &k.balance_half_life_ms, 1);
      r.Double(s, q, "kv_full_wait_seconds", &k.kv_full_wait_seconds, 0, 3600);
      r.Double(s, q, "open_lanes", &k.open_lanes, 0, 1);
      r.Double(s, q, "lane_weight", &k.lane_weight, 0, 100);
      r.Bool(s, q, "prediction_header", &k.prediction_header);
    }
  }
  if (const YAML::Node s = n["precise"]; s.IsDefined() && !s.IsNull())
    ReadPrecise(r, s, &c->precise);
}

}  // namespace kvgate::config
