// File: router/config/workers_section.cc
// The fleet named in the file: `workers` (each with its models, role, DP size, KV events and
// transfer peer) and `stores` (KV stores publishing events). ReadWorker is shared with the
// discovery sources' worker templates.
#include <set>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/strings.h"
#include "common/url.h"
#include "kvindex/group_imitation.h"
#include "kvindex/hybrid_groups.h"
#include "router/config/sections.h"
#include "router/config/yaml_reader.h"
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

// workers[].kv_groups: a hybrid model's groups beside full attention (approximate mode).
void ReadKvGroups(YamlReader& r, const YAML::Node& n, const std::string& path,
                  std::vector<KvGroupConfig>* groups) {
  if (!n.IsSequence()) {
    r.Error(n, path, "must be a list of {kind, sliding_window, num_gpu_blocks, chunk_tokens}");
    return;
  }
  if (n.size() > 8) {
    r.Error(n, path, "at most 8 groups");
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string at = common::StrCat(path, "[", i, "]");
    KvGroupConfig g;
    if (!r.ExpectMap(n[i], at, {"kind", "sliding_window", "num_gpu_blocks", "chunk_tokens"})) {
      continue;
    }
    kvindex::GroupKind kind;
    if (!r.String(n[i], at, "kind", &g.kind)) {
      r.Error(n[i], YamlReader::Join(at, "kind"), "is required (sliding_window or mamba)");
    } else if (!kvindex::ParseGroupKind(g.kind, &kind) ||
               kind == kvindex::GroupKind::kFullAttention) {
      r.Error(n[i]["kind"], YamlReader::Join(at, "kind"),
              common::StrCat("must be sliding_window or mamba (full attention is the worker's "
                             "kv_capacity_tokens), got '",
                             g.kind, "'"));
    } else {
      g.kind = std::string(kvindex::GroupKindName(kind));
      if (kind == kvindex::GroupKind::kMamba) {
        r.Uint(n[i], at, "chunk_tokens", &g.chunk_tokens, 0, 1u << 24);
      } else if (n[i]["chunk_tokens"].IsDefined()) {
        r.Error(n[i]["chunk_tokens"], YamlReader::Join(at, "chunk_tokens"), "is for mamba only");
      }
      if (kind != kvindex::GroupKind::kSlidingWindow) {
        // A window on a Mamba group means nothing; 0 keeps it out of comparisons.
      } else if (!n[i]["sliding_window"].IsDefined()) {
        r.Error(n[i], YamlReader::Join(at, "sliding_window"), "is required for a sliding window");
      } else {
        r.Uint(n[i], at, "sliding_window", &g.sliding_window, 1, 1u << 24);
      }
    }
    if (!n[i]["num_gpu_blocks"].IsDefined()) {
      r.Error(n[i], YamlReader::Join(at, "num_gpu_blocks"), "is required (the group's pool)");
    } else {
      r.Uint(n[i], at, "num_gpu_blocks", &g.num_gpu_blocks, 1,
             kvindex::GroupImitation::kMaxBlocksPerGroup);
    }
    groups->push_back(std::move(g));
  }
}

}  // namespace

void ReadWorker(YamlReader& r, const YAML::Node& node, const std::string& path, WorkerConfig* w,
                std::set<std::string>* seen, absl::Span<const std::string_view> extra) {
  std::vector<std::string_view> keys = {
      "models",    "role",           "dp_size",     "weight", "kv_capacity_tokens",
      "kv_events", "bootstrap_port", "zmq_address", "stores", "kv_groups"};
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
  r.StringList(node, path, "stores", &w->stores);  // Names checked against `stores` by Validate.
  if (const YAML::Node g = node["kv_groups"]; g.IsDefined() && !g.IsNull()) {
    ReadKvGroups(r, g, YamlReader::Join(path, "kv_groups"), &w->kv_groups);
  }
  ReadTransferPeer(r, node, path, w);
}

void ReadWorkers(YamlReader& r, const YAML::Node& n, std::vector<WorkerConfig>* workers) {
  if (!n.IsSequence()) {
    r.Error(n, "workers", "must be a list");
    return;
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < n.size(); ++i) {
    WorkerConfig w;
    ReadWorker(r, n[i], common::StrCat("workers[", i, "]"), &w, &seen);
    workers->push_back(std::move(w));
  }
}

void ReadStores(YamlReader& r, const YAML::Node& n, std::vector<StoreConfig>* stores) {
  if (!n.IsSequence()) {
    r.Error(n, "stores", "must be a list");
    return;
  }
  if (n.size() > 16) {
    r.Error(n, "stores", "at most 16 stores");
    return;
  }
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
      auto url = common::ParseHttpUrl(
          address.find("://") == std::string::npos ? common::StrCat("http://", address) : address);
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
    stores->push_back(std::move(st));
  }
}

}  // namespace kvgate::config
