// File: router/pd/transfer_params.h
// Whether the kv_transfer_params a vLLM prefill worker returned (NixlConnector, reference/
// protocols.md §4a) name that worker (issue 27): the decode worker connects to the host and port
// they give and asks for the blocks they list, so params naming another host, port or engine
// would point a decode at a machine of someone else's choosing. Checked before decode is
// contacted. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::router::pd {

/// What one prefill worker may name.
struct TransferPeer {
  std::vector<std::string> hosts;  // remote_host (and remote_hosts[], bootstrap_server_host)
  std::vector<uint16_t> ports;     // remote_port
  std::string engine_id;           // remote_engine_id; "" = not checked
};

struct TransferParamsMismatch {
  std::string_view field;  // the metric's label: remote_host, remote_port, ... or "malformed"
  std::string detail;      // for the log and the client's error message
};

/// nullopt when `params` (a JSON object) names `peer`: every `remote_host`, `remote_hosts`
/// entry and `bootstrap_server_host` among `peer.hosts` (ASCII case-insensitive, IPv6 with or
/// without brackets), `remote_port` present and among `peer.ports`, `remote_engine_id` equal to
/// `peer.engine_id` when that is set. `remote_host` and `remote_port` are required (a decode
/// without them has nowhere legitimate to pull from). A key given twice is checked each time
/// (an engine's JSON reader keeps the last one, a naive check the first).
std::optional<TransferParamsMismatch> CheckTransferParams(std::string_view params,
                                                          const TransferPeer& peer);

}  // namespace kvgate::router::pd
