#include "router/pd/pd_bodies.h"

#include <algorithm>
#include <vector>

#include "common/json_util.h"
#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::router::pd {
namespace {

namespace od = simdjson::ondemand;

constexpr std::pair<std::string_view, PdProtocol> kNames[] = {
    {"vllm-nixl", PdProtocol::kVllmNixl},
    {"vllm-mooncake", PdProtocol::kVllmMooncake},
    {"vllm-p2p-nccl", PdProtocol::kVllmP2pNccl},
    {"sglang-bootstrap", PdProtocol::kSglangBootstrap},
};

// One top-level member: its unescaped name and its value's bytes (inside the parsed body).
struct RawMember {
  std::string key;
  std::string_view value;
};

// A value's bytes without the whitespace simdjson's raw views carry after it.
std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

absl::Status Invalid(std::string_view why) {
  return absl::InvalidArgumentError(common::StrCat("request body: ", why));
}

// Splits a JSON object into its top-level members. The whole document is validated first
// (ondemand alone would pass nested values it skips over unread).
absl::Status Members(const simdjson::padded_string& json, od::parser& parser,
                     std::vector<RawMember>* out) {
  simdjson::dom::parser dom;
  simdjson::dom::element root;
  if (auto e = dom.parse(json).get(root); e) {
    return Invalid(common::StrCat("not valid JSON (", simdjson::error_message(e), ")"));
  }
  if (!root.is_object()) return Invalid("not a JSON object");
  od::document doc;
  od::object obj;
  if (parser.iterate(json).get(doc) || doc.get_object().get(obj)) {
    return Invalid("not a JSON object");
  }
  for (auto field : obj) {
    RawMember m;
    std::string_view key;
    od::value v;
    od::json_type type;
    if (field.unescaped_key().get(key) || field.value().get(v) || v.type().get(type)) {
      return Invalid("malformed member");
    }
    m.key = key;
    std::string_view bytes;
    simdjson::error_code e = simdjson::SUCCESS;
    if (type == od::json_type::object) {
      od::object o;
      e = v.get_object().get(o);
      if (!e) e = o.raw_json().get(bytes);
    } else if (type == od::json_type::array) {
      od::array a;
      e = v.get_array().get(a);
      if (!e) e = a.raw_json().get(bytes);
    } else {
      bytes = v.raw_json_token();
    }
    if (e) return Invalid(common::StrCat("malformed value of '", m.key, "'"));
    m.value = TrimRight(bytes);
    out->push_back(std::move(m));
  }
  return absl::OkStatus();
}

// The object of `members` less `remove`, with `set` replacing members in place (the first of
// duplicates) or appended in order.
std::string Serialize(const std::vector<RawMember>& members,
                      absl::Span<const std::string_view> remove, absl::Span<const JsonMember> set,
                      size_t size_hint) {
  std::vector<bool> placed(set.size(), false);
  std::string out;
  out.reserve(size_hint + 256);
  out.push_back('{');
  bool first = true;
  auto append = [&](std::string_view key, std::string_view value) {
    if (!first) out.push_back(',');
    first = false;
    common::AppendJsonString(out, key);
    out.push_back(':');
    out.append(value);
  };
  for (const RawMember& m : members) {
    if (std::find(remove.begin(), remove.end(), m.key) != remove.end()) continue;
    auto it =
        std::find_if(set.begin(), set.end(), [&](const JsonMember& s) { return s.first == m.key; });
    if (it == set.end()) {
      append(m.key, m.value);
      continue;
    }
    const size_t i = static_cast<size_t>(it - set.begin());
    if (placed[i]) continue;  // A duplicate member: the first one takes the new value.
    placed[i] = true;
    append(m.key, it->second);
  }
  for (size_t i = 0; i < set.size(); ++i) {
    if (!placed[i]) append(set[i].first, set[i].second);
  }
  out.push_back('}');
  return out;
}

}  // namespace

std::optional<PdProtocol> PdProtocolFromName(std::string_view name) {
  for (const auto& [n, p] : kNames) {
    if (n == name) return p;
  }
  return std::nullopt;
}

std::string_view PdProtocolName(PdProtocol protocol) {
  for (const auto& [n, p] : kNames) {
    if (p == protocol) return n;
  }
  return "unknown";
}

absl::StatusOr<std::string> RewriteTopLevel(std::string_view body,
                                            absl::Span<const std::string_view> remove,
                                            absl::Span<const JsonMember> set) {
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (auto s = Members(json, parser, &members); !s.ok()) return s;
  return Serialize(members, remove, set, body.size());
}

std::optional<std::string> DropTransferFields(std::string_view body) {
  if (body.find("kv_transfer_params") == std::string_view::npos &&
      body.find("bootstrap_") == std::string_view::npos &&
      body.find("disagg_prefill_dp_rank") == std::string_view::npos) {
    return std::nullopt;
  }
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (!Members(json, parser, &members).ok()) return std::nullopt;
  const bool any = std::any_of(members.begin(), members.end(), [](const RawMember& m) {
    return std::find(std::begin(kTransferFields), std::end(kTransferFields), m.key) !=
           std::end(kTransferFields);
  });
  if (!any) return std::nullopt;
  return Serialize(members, kTransferFields, {}, body.size());
}

absl::StatusOr<std::string> VllmPrefillBody(std::string_view body, std::string_view params) {
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (auto s = Members(json, parser, &members); !s.ok()) return s;
  std::vector<JsonMember> set = {{"stream", "false"}, {"max_tokens", "1"}};
  if (!params.empty()) set.push_back({"kv_transfer_params", params});
  // max_completion_tokens only when the client used it: an absent member stays absent.
  if (std::any_of(members.begin(), members.end(),
                  [](const RawMember& m) { return m.key == "max_completion_tokens"; })) {
    set.push_back({"max_completion_tokens", "1"});
  }
  constexpr std::string_view kRemove[] = {"stream_options", "min_tokens", "min_completion_tokens"};
  return Serialize(members, kRemove, set, body.size());
}

absl::StatusOr<std::string> VllmMessagesPrefillBody(std::string_view body,
                                                    std::string_view params) {
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (auto s = Members(json, parser, &members); !s.ok()) return s;
  std::vector<JsonMember> set = {{"stream", "false"}, {"max_tokens", "1"}};
  if (!params.empty()) set.push_back({"kv_transfer_params", params});
  std::vector<std::string_view> remove;
  for (const RawMember& m : members) {
    if (m.key != "thinking") continue;
    // {"type": "enabled", ...}: its type, read from the member's raw value.
    const simdjson::padded_string value(m.value);
    od::parser value_parser;
    od::document doc;
    std::string_view type;
    if (!value_parser.iterate(value).get(doc) && !doc["type"].get_string().get(type) &&
        type == "enabled") {
      remove.push_back("thinking");
    }
  }
  return Serialize(members, remove, set, body.size());
}

absl::StatusOr<std::string> VllmDecodeBody(std::string_view body, std::string_view params) {
  const JsonMember set[] = {{"kv_transfer_params", params}};
  return RewriteTopLevel(body, {}, set);
}

std::string MooncakeDecodeParams(std::string_view prefill_host, uint16_t bootstrap_port) {
  std::string out = R"({"do_remote_decode":false,"do_remote_prefill":true,)"
                    R"("bootstrap_server_host":)";
  common::AppendJsonString(out, BracketHost(prefill_host));
  common::StrAppend(&out, ",\"bootstrap_server_port\":", bootstrap_port, "}");
  return out;
}

std::string P2pNcclRequestId(std::string_view prefill_zmq, std::string_view decode_zmq,
                             std::string_view hex) {
  return common::StrCat("___prefill_addr_", prefill_zmq, "___decode_addr_", decode_zmq, "_", hex);
}

absl::StatusOr<std::string> SglangBody(std::string_view body, std::string_view prefill_host,
                                       uint16_t bootstrap_port, uint64_t room, int routed_dp_rank,
                                       int prefill_dp_rank) {
  std::string host;
  common::AppendJsonString(host, BracketHost(prefill_host));
  const std::string port = common::StrCat(bootstrap_port);
  // 63 bits: SGLang draws rooms in [0, 2^63 - 1].
  const std::string room_json = common::StrCat(room & ((uint64_t{1} << 63) - 1));
  const std::string routed = common::StrCat(routed_dp_rank);
  const std::string prefill = common::StrCat(prefill_dp_rank);
  std::vector<JsonMember> set = {
      {"bootstrap_host", host}, {"bootstrap_port", port}, {"bootstrap_room", room_json}};
  if (routed_dp_rank >= 0) set.push_back({"routed_dp_rank", routed});
  if (prefill_dp_rank >= 0) set.push_back({"disagg_prefill_dp_rank", prefill});
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (auto s = Members(json, parser, &members); !s.ok()) return s;
  // A batch (/generate with a list of prompts) needs a room per prompt: not supported.
  auto list_of = [](std::string_view v, char inner) {
    if (!v.starts_with('[')) return false;
    const size_t at = v.find_first_not_of(" \t\r\n", 1);
    return inner == 0 || (at != std::string_view::npos && v[at] == inner);
  };
  for (const RawMember& m : members) {
    if ((m.key == "text" && list_of(m.value, 0)) ||
        (m.key == "input_ids" && list_of(m.value, '['))) {
      return absl::InvalidArgumentError(
          "a batch of prompts cannot be disaggregated with sglang-bootstrap: send one prompt "
          "per request");
    }
  }
  return Serialize(members, {}, set, body.size());
}

namespace {

// The raw value of member `key`, if present.
std::optional<std::string_view> Find(const std::vector<RawMember>& members, std::string_view key) {
  for (const RawMember& m : members) {
    if (m.key == key) return m.value;
  }
  return std::nullopt;
}

// The elements of a raw JSON array, without its brackets and outer whitespace.
std::string_view Inner(std::string_view array) {
  array.remove_prefix(1);
  array.remove_suffix(1);
  const size_t b = array.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return TrimRight(array.substr(b));
}

}  // namespace

bool WantsInputLogprobs(std::string_view body) {
  const simdjson::padded_string json(body);
  od::parser parser;
  std::vector<RawMember> members;
  if (!Members(json, parser, &members).ok()) return false;
  return Find(members, "return_logprob") == "true" && Find(members, "stream") != "true";
}

absl::StatusOr<std::string> MergeInputLogprobs(std::string_view prefill, std::string_view decode) {
  // Both answers, and their meta_info objects, split into members.
  const simdjson::padded_string p_json(prefill), d_json(decode);
  od::parser p_parser, d_parser, pm_parser, dm_parser;
  std::vector<RawMember> p, d, p_meta, d_meta;
  if (auto s = Members(p_json, p_parser, &p); !s.ok()) return s;
  if (auto s = Members(d_json, d_parser, &d); !s.ok()) return s;
  const auto pm = Find(p, "meta_info"), dm = Find(d, "meta_info");
  if (!pm || !dm || !pm->starts_with('{') || !dm->starts_with('{')) return std::string(decode);
  const simdjson::padded_string pm_json(*pm), dm_json(*dm);
  if (!Members(pm_json, pm_parser, &p_meta).ok() || !Members(dm_json, dm_parser, &d_meta).ok()) {
    return std::string(decode);
  }
  const auto pl = Find(p_meta, "input_token_logprobs"), dl = Find(d_meta, "input_token_logprobs");
  if (!pl || !dl || !pl->starts_with('[') || !dl->starts_with('[')) return std::string(decode);
  const std::string_view a = Inner(*pl), b = Inner(*dl);
  const std::string merged = common::StrCat("[", a, !a.empty() && !b.empty() ? "," : "", b, "]");
  const JsonMember meta_set[] = {{"input_token_logprobs", merged}};
  const std::string meta = Serialize(d_meta, {}, meta_set, dm->size() + merged.size());
  const JsonMember set[] = {{"meta_info", meta}};
  return Serialize(d, {}, set, decode.size() + merged.size());
}

std::string BracketHost(std::string_view host) {
  if (host.find(':') != std::string_view::npos && !host.starts_with('[')) {
    return common::StrCat("[", host, "]");
  }
  return std::string(host);
}

absl::StatusOr<std::string> KvTransferParamsOf(std::string_view response) {
  const simdjson::padded_string json(response);
  od::parser parser;
  std::vector<RawMember> members;
  if (auto s = Members(json, parser, &members); !s.ok()) return s;
  for (const RawMember& m : members) {
    if (m.key == "kv_transfer_params" && m.value != "null") return std::string(m.value);
  }
  return absl::NotFoundError("prefill's response has no kv_transfer_params");
}

}  // namespace kvgate::router::pd
