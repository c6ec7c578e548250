// File: sim/pd_protocol.h
// Prefill/decode disaggregation as the four wire protocols a router speaks to vLLM and SGLang
// (shared/reference/protocols.md §4): which requests are a prefill or decode stage, the key
// the held KV goes by, and where a decode finds its prefill. Pure parsing; the transfer itself
// is sim/pd_agent.h. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvgate::sim {

enum class PdRole { kMixed, kPrefill, kDecode };
enum class PdProtocol { kVllmNixl, kVllmMooncake, kVllmP2pNccl, kSglangBootstrap };

std::string_view PdRoleName(PdRole role);
std::string_view PdProtocolName(PdProtocol protocol);
/// "prefill", "decode", "mixed". @return kInvalidArgument otherwise.
absl::StatusOr<PdRole> ParsePdRole(std::string_view name);
/// "vllm-nixl", "vllm-mooncake", "vllm-p2p-nccl", "sglang-bootstrap".
absl::StatusOr<PdProtocol> ParsePdProtocol(std::string_view name);

enum class PdStage { kNone, kPrefill, kDecode };

/// What one completion request asks of a P/D worker.
struct PdRequest {
  PdStage stage = PdStage::kNone;  // kNone: served as on a mixed worker.
  std::string key;                 // Names the held KV on the prefill's side channel.
  // Decode: the prefill's side channel (empty host or port 0: unknown, so recompute).
  std::string remote_host;
  uint16_t remote_port = 0;
  std::string remote_engine_id;  // vllm-nixl: the engine the KV must come from; empty: any.
  // Decode: the prefill may not have finished, or even started (vllm-mooncake and
  // sglang-bootstrap send both stages at once); the others come after the prefill's answer.
  bool wait_for_prefill = false;
  // Prefill, sglang-bootstrap: the prefill server computes the prompt only (one token) and
  // answers once the decode took the KV (or it timed out).
  bool prefill_only = false;
  bool answer_after_release = false;
};

/// Classifies a completion request on a worker of `role`. `request_id` is the X-Request-Id the
/// server answers with. @return kInvalidArgument for protocol fields of the wrong type (a
/// bootstrap_room that is not an integer, a batched room list).
absl::StatusOr<PdRequest> ParsePdRequest(PdRole role, PdProtocol protocol, std::string_view body,
                                         std::string_view request_id);

/// The prefill address in a P2pNcclConnector request id
/// (`___prefill_addr_<host:port>___decode_addr_<host:port>_<hex>`), or "" when it is not one.
std::string P2pPrefillAddress(std::string_view request_id);

/// Splits "host:port" / "[v6]:port". @return false when malformed.
bool SplitHostPort(std::string_view address, std::string* host, uint16_t* port);

}  // namespace kvgate::sim
