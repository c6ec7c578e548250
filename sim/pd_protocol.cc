// File: sim/pd_protocol.cc
#include "sim/pd_protocol.h"

#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::sim {
namespace {

constexpr std::string_view kP2pPrefill = "___prefill_addr_";
constexpr std::string_view kP2pDecode = "___decode_addr_";

std::string StringField(simdjson::dom::object obj, std::string_view key) {
  std::string_view v;
  return obj[key].get(v) ? std::string() : std::string(v);
}

bool BoolField(simdjson::dom::object obj, std::string_view key) {
  bool b = false;
  return !obj[key].get(b) && b;
}

// Proxies send ports as numbers; accept digit strings too. 0 when absent or out of range.
uint16_t PortField(simdjson::dom::object obj, std::string_view key) {
  uint64_t u = 0;
  std::string_view s;
  if (obj[key].get(u) && (obj[key].get(s) || !common::ParseUint64(s, &u))) return 0;
  return u > 0 && u <= 65535 ? static_cast<uint16_t>(u) : 0;
}

// IPv6 hosts travel in brackets (protocols.md §4); resolvers want them bare.
std::string BareHost(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

std::string_view PdRoleName(PdRole role) {
  switch (role) {
    case PdRole::kPrefill:
      return "prefill";
    case PdRole::kDecode:
      return "decode";
    case PdRole::kMixed:
      break;
  }
  return "mixed";
}

std::string_view PdProtocolName(PdProtocol protocol) {
  switch (protocol) {
    case PdProtocol::kVllmMooncake:
      return "vllm-mooncake";
    case PdProtocol::kVllmP2pNccl:
      return "vllm-p2p-nccl";
    case PdProtocol::kSglangBootstrap:
      return "sglang-bootstrap";
    case PdProtocol::kVllmNixl:
      break;
  }
  return "vllm-nixl";
}

absl::StatusOr<PdRole> ParsePdRole(std::string_view name) {
  for (PdRole r : {PdRole::kMixed, PdRole::kPrefill, PdRole::kDecode}) {
    if (name == PdRoleName(r)) return r;
  }
  return absl::InvalidArgumentError(common::StrCat("unknown role ", name));
}

absl::StatusOr<PdProtocol> ParsePdProtocol(std::string_view name) {
  for (PdProtocol p : {PdProtocol::kVllmNixl, PdProtocol::kVllmMooncake, PdProtocol::kVllmP2pNccl,
                       PdProtocol::kSglangBootstrap}) {
    if (name == PdProtocolName(p)) return p;
  }
  return absl::InvalidArgumentError(common::StrCat("unknown P/D protocol ", name));
}

bool SplitHostPort(std::string_view address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  uint64_t p = 0;
  if (!common::ParseUint64(address.substr(colon + 1), &p) || p == 0 || p > 65535) return false;
  *host = BareHost(std::string(address.substr(0, colon)));
  *port = static_cast<uint16_t>(p);
  return !host->empty();
}

std::string P2pPrefillAddress(std::string_view request_id) {
  if (!request_id.starts_with(kP2pPrefill)) return "";
  const size_t end = request_id.find(kP2pDecode, kP2pPrefill.size());
  if (end == std::string_view::npos) return "";
  return std::string(request_id.substr(kP2pPrefill.size(), end - kP2pPrefill.size()));
}

absl::StatusOr<PdRequest> ParsePdRequest(PdRole role, PdProtocol protocol, std::string_view body,
                                         std::string_view request_id) {
  PdRequest out;
  if (role == PdRole::kMixed) return out;
  const bool prefill = role == PdRole::kPrefill;
  if (protocol == PdProtocol::kVllmP2pNccl) {
    // No body fields: the peers' addresses are in the request id, the key is the id itself.
    const std::string addr = P2pPrefillAddress(request_id);
    if (addr.empty()) return out;
    out.stage = prefill ? PdStage::kPrefill : PdStage::kDecode;
    out.key = std::string(request_id);
    if (!prefill && !SplitHostPort(addr, &out.remote_host, &out.remote_port)) {
      out.remote_host.clear();
    }
    return out;
  }
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(body.data(), body.size()).get(obj)) return out;  // Parse() reports it.

  if (protocol == PdProtocol::kSglangBootstrap) {
    simdjson::dom::element room;
    if (obj["bootstrap_room"].get(room) || room.is_null()) return out;
    uint64_t r = 0;
    int64_t signed_room = 0;
    if (room.get(r)) {
      if (room.get(signed_room) || signed_room < 0) {
        return absl::InvalidArgumentError(
            "bootstrap_room must be a non-negative integer (kvgate-sim serves one prompt)");
      }
      r = static_cast<uint64_t>(signed_room);
    }
    out.stage = prefill ? PdStage::kPrefill : PdStage::kDecode;
    out.key = common::StrCat("room-", r);
    out.prefill_only = out.answer_after_release = prefill;
    if (!prefill) {
      out.wait_for_prefill = true;
      out.remote_host = BareHost(StringField(obj, "bootstrap_host"));
      out.remote_port = PortField(obj, "bootstrap_port");
    }
    return out;
  }

  simdjson::dom::object params;
  if (obj["kv_transfer_params"].get(params)) return out;
  if (prefill && BoolField(params, "do_remote_decode")) {
    out.stage = PdStage::kPrefill;
    out.key = std::string(request_id);
  } else if (!prefill && BoolField(params, "do_remote_prefill")) {
    out.stage = PdStage::kDecode;
    out.key = std::string(request_id);
    if (protocol == PdProtocol::kVllmMooncake) {
      out.wait_for_prefill = true;
      out.remote_host = BareHost(StringField(params, "bootstrap_server_host"));
      out.remote_port = PortField(params, "bootstrap_server_port");
    } else {
      out.remote_host = BareHost(StringField(params, "remote_host"));
      out.remote_port = PortField(params, "remote_port");
      out.remote_engine_id = StringField(params, "remote_engine_id");
      // Newer vLLM names the prefill's own request id; older ones share X-Request-Id.
      if (std::string id = StringField(params, "remote_request_id"); !id.empty()) out.key = id;
    }
  }
  return out;
}

}  // namespace kvgate::sim
