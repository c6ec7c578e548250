#include "router/discovery/endpoint_slices.h"

#include <algorithm>

#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::router::k8s {
namespace {

using simdjson::dom::element;

std::string Str(element e, const char* key) {
  std::string_view v;
  if (e[key].get(v) != simdjson::SUCCESS) return "";
  return std::string(v);
}

bool Bool(element e, const char* key, bool fallback) {
  bool v = false;
  return e[key].get(v) == simdjson::SUCCESS ? v : fallback;
}

StringMap Map(element e, const char* key) {
  StringMap out;
  simdjson::dom::object o;
  if (e[key].get(o) != simdjson::SUCCESS) return out;
  for (auto [k, v] : o) {
    std::string_view s;
    if (v.get(s) == simdjson::SUCCESS) out.emplace(std::string(k), std::string(s));
  }
  return out;
}

absl::StatusOr<EndpointSlice> ParseSlice(element obj) {
  EndpointSlice s;
  element meta;
  if (obj["metadata"].get(meta) != simdjson::SUCCESS || Str(meta, "name").empty()) {
    return absl::InvalidArgumentError("EndpointSlice without metadata.name");
  }
  s.name = Str(meta, "name");
  s.namespace_ = Str(meta, "namespace");
  s.resource_version = Str(meta, "resourceVersion");
  s.labels = Map(meta, "labels");
  s.address_type = Str(obj, "addressType");
  simdjson::dom::array endpoints;
  if (obj["endpoints"].get(endpoints) == simdjson::SUCCESS) {  // null or absent: none
    for (element e : endpoints) {
      SliceEndpoint ep;
      simdjson::dom::array addrs;
      if (e["addresses"].get(addrs) == simdjson::SUCCESS) {
        for (element a : addrs) {
          std::string_view v;
          if (a.get(v) == simdjson::SUCCESS) {
            ep.address = std::string(v);
            break;
          }
        }
      }
      element cond;
      if (e["conditions"].get(cond) == simdjson::SUCCESS) {
        ep.ready = Bool(cond, "ready", true);
        ep.serving = Bool(cond, "serving", ep.ready);
        ep.terminating = Bool(cond, "terminating", false);
      }
      element ref;
      if (e["targetRef"].get(ref) == simdjson::SUCCESS && Str(ref, "kind") == "Pod") {
        ep.pod_name = Str(ref, "name");
        ep.pod_uid = Str(ref, "uid");
      }
      s.endpoints.push_back(std::move(ep));
    }
  }
  simdjson::dom::array ports;
  if (obj["ports"].get(ports) == simdjson::SUCCESS) {
    for (element p : ports) {
      SlicePort port;
      port.name = Str(p, "name");
      int64_t n = 0;
      if (p["port"].get(n) == simdjson::SUCCESS && n > 0 && n <= 65535) {
        port.port = static_cast<uint16_t>(n);
      }
      s.ports.push_back(std::move(port));
    }
  }
  return s;
}

absl::StatusOr<element> Parse(simdjson::dom::parser& parser, std::string_view json,
                              const char* what) {
  element root;
  if (auto err = parser.parse(json.data(), json.size()).get(root); err != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        common::StrCat(what, " is not valid JSON: ", simdjson::error_message(err)));
  }
  if (!root.is_object())
    return absl::InvalidArgumentError(common::StrCat(what, " is not an object"));
  return root;
}

uint64_t ParseNumber(const std::string& v, uint64_t min, uint64_t max, bool* ok) {
  uint64_t n = 0;
  *ok = common::ParseUint64(v, &n) && n >= min && n <= max;
  return n;
}

// The endpoint `tcp://address:port` (IPv6 in brackets), as ZeroMQ wants it.
std::string TcpEndpoint(const std::string& address, uint64_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return common::StrCat("tcp://", v6 ? "[" : "", address, v6 ? "]" : "", ":", port);
}

}  // namespace

absl::StatusOr<SliceList> ParseSliceList(std::string_view json) {
  simdjson::dom::parser parser;
  auto root = Parse(parser, json, "EndpointSliceList");
  if (!root.ok()) return root.status();
  SliceList out;
  element meta;
  if ((*root)["metadata"].get(meta) == simdjson::SUCCESS) {
    out.resource_version = Str(meta, "resourceVersion");
  }
  if (out.resource_version.empty()) {
    return absl::InvalidArgumentError("EndpointSliceList without metadata.resourceVersion");
  }
  simdjson::dom::array items;
  if ((*root)["items"].get(items) == simdjson::SUCCESS) {
    for (element item : items) {
      auto s = ParseSlice(item);
      if (!s.ok()) return s.status();
      out.items.push_back(*std::move(s));
    }
  }
  return out;
}

absl::StatusOr<WatchEvent> ParseWatchEvent(std::string_view json) {
  simdjson::dom::parser parser;
  auto root = Parse(parser, json, "watch event");
  if (!root.ok()) return root.status();
  WatchEvent ev;
  const std::string type = Str(*root, "type");
  element obj;
  if ((*root)["object"].get(obj) != simdjson::SUCCESS || !obj.is_object()) {
    return absl::InvalidArgumentError(common::StrCat("watch event '", type, "' without an object"));
  }
  if (type == "ERROR") {
    ev.type = WatchEvent::Type::kError;
    int64_t code = 0;
    if (obj["code"].get(code) == simdjson::SUCCESS) ev.error_code = static_cast<int>(code);
    ev.error_message = Str(obj, "message");
    return ev;
  }
  if (type == "ADDED") {
    ev.type = WatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = WatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    ev.type = WatchEvent::Type::kDeleted;
  } else if (type == "BOOKMARK") {
    ev.type = WatchEvent::Type::kBookmark;
  } else {
    return absl::InvalidArgumentError(common::StrCat("unknown watch event type '", type, "'"));
  }
  element meta;
  if (obj["metadata"].get(meta) == simdjson::SUCCESS) {
    ev.resource_version = Str(meta, "resourceVersion");
  }
  if (ev.type != WatchEvent::Type::kBookmark) {
    auto s = ParseSlice(obj);
    if (!s.ok()) return s.status();
    ev.slice = *std::move(s);
  }
  return ev;
}

absl::StatusOr<PodMetadata> ParsePodMetadata(std::string_view json) {
  simdjson::dom::parser parser;
  auto root = Parse(parser, json, "Pod");
  if (!root.ok()) return root.status();
  element meta;
  if ((*root)["metadata"].get(meta) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("Pod without metadata");
  }
  return PodMetadata{Map(meta, "annotations"), Map(meta, "labels")};
}

std::string StatusMessage(std::string_view json) {
  simdjson::dom::parser parser;
  if (auto root = Parse(parser, json, "Status"); root.ok()) {
    if (std::string m = Str(*root, "message"); !m.empty()) return m;
  }
  return std::string(json.substr(0, 200));
}

EndpointState StateOf(const SliceEndpoint& e) {
  if (e.terminating) return EndpointState::kTerminating;
  return e.ready ? EndpointState::kReady : EndpointState::kNotReady;
}

std::vector<std::string> ApplyWorkerMetadata(const StringMap& keys, const std::string& address,
                                             const config::KubernetesDiscoveryConfig& source,
                                             config::WorkerConfig* w) {
  std::vector<std::string> problems;
  auto bad = [&](const std::string& key, const std::string& value, std::string_view want) {
    problems.push_back(common::StrCat(key, "='", value, "' ignored (", want, ")"));
  };
  // In this order: the replay port and block size refine the events endpoint the port makes.
  static constexpr std::string_view kNames[] = {"role",
                                                "dp-size",
                                                "weight",
                                                "kv-capacity-tokens",
                                                "bootstrap-port",
                                                "kv-events-port",
                                                "kv-events-replay-port",
                                                "block-size"};
  for (std::string_view name : kNames) {
    const std::string key = common::StrCat("kvgate.io/", name);
    const auto found = keys.find(key);
    if (found == keys.end()) continue;
    const std::string& value = found->second;
    bool ok = true;
    if (name == "role") {
      if (value == "mixed") {
        w->role = config::WorkerRole::kMixed;
      } else if (value == "prefill") {
        w->role = config::WorkerRole::kPrefill;
      } else if (value == "decode") {
        w->role = config::WorkerRole::kDecode;
      } else {
        bad(key, value, "mixed, prefill or decode");
      }
    } else if (name == "dp-size") {
      const uint64_t n = ParseNumber(value, 1, 1024, &ok);
      ok ? void(w->dp_size = static_cast<uint32_t>(n)) : bad(key, value, "1 to 1024");
    } else if (name == "weight") {
      double d = 0;
      ok = common::ParseDouble(value, &d) && d >= 0 && d <= 1e6;
      ok ? void(w->weight = d) : bad(key, value, "a number from 0 to 1e6");
    } else if (name == "kv-capacity-tokens") {
      const uint64_t n = ParseNumber(value, 0, UINT64_MAX, &ok);
      ok ? void(w->kv_capacity_tokens = n) : bad(key, value, "a token count");
    } else if (name == "bootstrap-port") {
      const uint64_t n = ParseNumber(value, 1, 65535, &ok);
      ok ? void(w->bootstrap_port = static_cast<uint16_t>(n)) : bad(key, value, "a port");
    } else if (name == "kv-events-port") {
      const uint64_t n = ParseNumber(value, 1, 65535, &ok);
      if (!ok) {
        bad(key, value, "a port");
        continue;
      }
      if (!w->kv_events) {
        w->kv_events.emplace();
        w->kv_events->topic = source.kv_events_topic;
        w->kv_events->block_size = source.kv_events_block_size;
      }
      w->kv_events->endpoint = TcpEndpoint(address, n);
    } else if (name == "kv-events-replay-port") {
      const uint64_t n = ParseNumber(value, 1, 65535, &ok);
      if (!ok) {
        bad(key, value, "a port");
      } else if (w->kv_events) {
        w->kv_events->replay_endpoint = TcpEndpoint(address, n);
      }
    } else if (name == "block-size") {
      const uint64_t n = ParseNumber(value, 1, 4096, &ok);
      if (!ok) {
        bad(key, value, "1 to 4096");
      } else if (w->kv_events) {
        w->kv_events->block_size = static_cast<uint32_t>(n);
      }
    }
  }
  return problems;
}

std::vector<DiscoveredWorker> WorkersFromSlices(const std::vector<const EndpointSlice*>& slices,
                                                const std::map<std::string, PodMetadata>& pods,
                                                const config::KubernetesDiscoveryConfig& source,
                                                std::vector<std::string>* problems,
                                                std::vector<RefusedAddress>* refused) {
  const AddressPolicy policy(source.allowed_networks, source.allowed_ports);
  std::map<std::string, DiscoveredWorker> by_url;
  for (const EndpointSlice* s : slices) {
    if (s->address_type != "IPv4" && s->address_type != "IPv6") {
      problems->push_back(common::StrCat("slice ", s->name, ": addressType '", s->address_type,
                                         "' left out (IPv4 and IPv6 only)"));
      continue;
    }
    uint16_t port = source.port;
    if (port == 0) {
      for (const SlicePort& p : s->ports) {
        if (p.port != 0 && (source.port_name.empty() || p.name == source.port_name)) {
          port = p.port;
          break;
        }
      }
    }
    if (port == 0) {
      if (!s->endpoints.empty()) {
        problems->push_back(common::StrCat("slice ", s->name, ": no port named '", source.port_name,
                                           "'; its endpoints are left out"));
      }
      continue;
    }
    for (const SliceEndpoint& e : s->endpoints) {
      if (e.address.empty()) continue;
      if (const AddressRefusal why = policy.Check(e.address, port); why != AddressRefusal::kNone) {
        if (refused != nullptr) refused->push_back({e.address, port, why});
        continue;
      }
      const bool v6 = e.address.find(':') != std::string::npos;
      auto url = common::ParseHttpUrl(
          common::StrCat("http://", v6 ? "[" : "", e.address, v6 ? "]" : "", ":", port));
      if (!url.ok()) {
        problems->push_back(common::StrCat("slice ", s->name, ": ", url.status().message()));
        continue;
      }
      DiscoveredWorker w{source.worker, StateOf(e)};
      w.config.url = *url;
      if (source.kv_events_port != 0) {
        auto& k = w.config.kv_events.emplace();
        k.endpoint = TcpEndpoint(e.address, source.kv_events_port);
        if (source.kv_events_replay_port != 0) {
          k.replay_endpoint = TcpEndpoint(e.address, source.kv_events_replay_port);
        }
        k.topic = source.kv_events_topic;
        k.block_size = source.kv_events_block_size;
      }
      std::vector<std::string> p = ApplyWorkerMetadata(s->labels, e.address, source, &w.config);
      if (auto pod = pods.find(e.pod_uid); !e.pod_uid.empty() && pod != pods.end()) {
        auto a = ApplyWorkerMetadata(pod->second.labels, e.address, source, &w.config);
        p.insert(p.end(), a.begin(), a.end());
        a = ApplyWorkerMetadata(pod->second.annotations, e.address, source, &w.config);
        p.insert(p.end(), a.begin(), a.end());
      }
      for (auto& line : p) {
        problems->push_back(
            common::StrCat("pod ", e.pod_name.empty() ? e.address : e.pod_name, ": ", line));
      }
      const std::string key = w.config.url.ToString();
      auto [it, inserted] = by_url.emplace(key, w);
      if (!inserted && static_cast<int>(w.state) < static_cast<int>(it->second.state)) {
        it->second = std::move(w);
      }
    }
  }
  std::vector<DiscoveredWorker> out;
  out.reserve(by_url.size());
  for (auto& [_, w] : by_url) out.push_back(std::move(w));
  return out;
}

}  // namespace kvgate::router::k8s
