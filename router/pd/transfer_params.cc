#include "router/pd/transfer_params.h"

#include <algorithm>

#include "common/strings.h"
#include "simdjson.h"

namespace kvgate::router::pd {
namespace {

// A host as compared: lower case, IPv6 without brackets.
std::string PeerHostKey(std::string_view h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string out(h);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool HostAllowed(std::string_view host, const TransferPeer& peer) {
  const std::string key = PeerHostKey(host);
  return !key.empty() && std::any_of(peer.hosts.begin(), peer.hosts.end(),
                                     [&](const auto& h) { return PeerHostKey(h) == key; });
}

TransferParamsMismatch Mismatch(std::string_view field, std::string detail) {
  return TransferParamsMismatch{field, std::move(detail)};
}

std::string Allowed(const TransferPeer& peer) {
  std::vector<std::string> ports;
  for (uint16_t p : peer.ports) ports.push_back(std::to_string(p));
  return common::StrCat("hosts [", common::StrJoin(peer.hosts, ", "), "], ports [",
                        common::StrJoin(ports, ", "), "]");
}

}  // namespace

std::optional<TransferParamsMismatch> CheckTransferParams(std::string_view params,
                                                          const TransferPeer& peer) {
  const simdjson::padded_string json(params);
  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(json).get(obj)) {
    return Mismatch("malformed", "kv_transfer_params is not a JSON object");
  }
  bool host_seen = false, port_seen = false;
  for (auto [key, value] : obj) {
    if (key == "remote_host" || key == "bootstrap_server_host") {
      std::string_view host;
      if (value.get(host) || !HostAllowed(host, peer)) {
        return Mismatch("remote_host",
                        common::StrCat(key, " ", simdjson::minify(value),
                                       " is not the prefill worker's (", Allowed(peer), ")"));
      }
      host_seen |= key == "remote_host";
    } else if (key == "remote_hosts") {
      simdjson::dom::array hosts;
      if (value.get(hosts)) return Mismatch("remote_host", "remote_hosts is not a list");
      for (auto h : hosts) {
        std::string_view host;
        if (h.get(host) || !HostAllowed(host, peer)) {
          return Mismatch("remote_host",
                          common::StrCat("remote_hosts names ", simdjson::minify(h),
                                         ", not the prefill worker (", Allowed(peer), ")"));
        }
      }
    } else if (key == "remote_port") {
      uint64_t port = 0;
      if (value.get(port) ||
          std::find(peer.ports.begin(), peer.ports.end(), port) == peer.ports.end()) {
        return Mismatch("remote_port",
                        common::StrCat("remote_port ", simdjson::minify(value),
                                       " is not the prefill worker's (", Allowed(peer), ")"));
      }
      port_seen = true;
    } else if (key == "remote_engine_id" && !peer.engine_id.empty()) {
      std::string_view id;
      if (value.get(id) || id != peer.engine_id) {
        return Mismatch("remote_engine_id",
                        common::StrCat("remote_engine_id ", simdjson::minify(value),
                                       " is not the prefill worker's (", peer.engine_id, ")"));
      }
    }
  }
  if (!host_seen) return Mismatch("remote_host", "kv_transfer_params has no remote_host");
  if (!port_seen) return Mismatch("remote_port", "kv_transfer_params has no remote_port");
  return std::nullopt;
}

}  // namespace kvgate::router::pd
