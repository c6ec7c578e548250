// File: router/pd/pd_bodies.h
// What kvgate sends to a prefill and to a decode worker under each P/D protocol (reference/
// protocols.md §4): the client's body rewritten at its top level only — every member kvgate
// does not change keeps its exact bytes, so a decode worker sees the client's own numbers and
// strings — plus the ids and parameters the engines' connectors match transfers by. Pure
// functions, no I/O; the P/D dispatcher and the golden tests share them. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvgate::router::pd {

enum class PdProtocol {
  kVllmNixl,         // prefill first (max_tokens 1), its kv_transfer_params to decode
  kVllmMooncake,     // both at once, decode pointed at prefill's bootstrap server
  kVllmP2pNccl,      // prefill first; peers' addresses in X-Request-Id
  kSglangBootstrap,  // the same body to both at once, with a bootstrap rendezvous
};

std::optional<PdProtocol> PdProtocolFromName(std::string_view name);
std::string_view PdProtocolName(PdProtocol protocol);

/// A member to set: its name and its value as raw JSON.
using JsonMember = std::pair<std::string_view, std::string_view>;

/// `body` (a JSON object) with the top-level members named in `remove` dropped and those in
/// `set` replacing a member of the same name in place, or appended in order when absent.
/// @return kInvalidArgument when `body` is not one JSON object.
absl::StatusOr<std::string> RewriteTopLevel(std::string_view body,
                                            absl::Span<const std::string_view> remove,
                                            absl::Span<const JsonMember> set);

/// vLLM's prefill request (NIXL and Mooncake connectors): `stream` false, `max_tokens` 1 (and
/// `max_completion_tokens` 1 when present), without `stream_options`, `min_tokens` and
/// `min_completion_tokens` (prefill does not support them), `kv_transfer_params` = `params`
/// (none when empty: P2pNcclConnector matches by request id).
absl::StatusOr<std::string> VllmPrefillBody(std::string_view body, std::string_view params);

/// vLLM's prefill request for an Anthropic /v1/messages body (vLLM's Anthropic layer passes
/// `kv_transfer_params` to its chat pipeline and returns them in a non-streamed answer):
/// `stream` false, `max_tokens` 1, `kv_transfer_params` = `params` (none when empty), and an
/// enabled `thinking` dropped (its budget must stay below max_tokens; an absent one renders the
/// same prompt, while `disabled` would not, so it stays).
absl::StatusOr<std::string> VllmMessagesPrefillBody(std::string_view body, std::string_view params);

/// vLLM's decode request: the client's body (its own `stream`, `max_tokens`, ...) with
/// `kv_transfer_params` = `params`, forwarded verbatim from prefill's response (NIXL) or built
/// by kvgate (Mooncake).
absl::StatusOr<std::string> VllmDecodeBody(std::string_view body, std::string_view params);

/// What prefill is told under NIXL: export the KV for a remote decode.
inline constexpr std::string_view kNixlPrefillParams =
    R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
    R"("remote_block_ids":null,"remote_host":null,"remote_port":null})";
/// ... and under vLLM's MooncakeConnector.
inline constexpr std::string_view kMooncakePrefillParams =
    R"({"do_remote_decode":true,"do_remote_prefill":false})";
/// What decode is told under vLLM's MooncakeConnector: pull from prefill's bootstrap server.
std::string MooncakeDecodeParams(std::string_view prefill_host, uint16_t bootstrap_port);

/// The X-Request-Id vLLM's P2pNcclConnector parses its peers' ZMQ addresses out of:
/// "___prefill_addr_<P>___decode_addr_<D>_<hex>". Exactly this shape, or the transfer fails.
std::string P2pNcclRequestId(std::string_view prefill_zmq, std::string_view decode_zmq,
                             std::string_view hex);

/// SGLang's P/D body: top-level `bootstrap_host` (prefill's host, IPv6 in brackets),
/// `bootstrap_port` (its --disaggregation-bootstrap-port) and `bootstrap_room` (a random 63-bit
/// rendezvous id) — the same for both stages — plus, with data parallelism, `routed_dp_rank`
/// (the rank of the worker the body goes to, when >= 0) and, for decode, `disagg_prefill_dp_rank`
/// (the prefill rank it pulls from, when >= 0), as SGLang's gateway sends them.
/// @return kInvalidArgument for a batch (`text` a list, `input_ids` a list of lists), which
///         would need a room per prompt.
absl::StatusOr<std::string> SglangBody(std::string_view body, std::string_view prefill_host,
                                       uint16_t bootstrap_port, uint64_t room,
                                       int routed_dp_rank = -1, int prefill_dp_rank = -1);

/// Whether an SGLang request asks for its prompt's logprobs in one whole answer: top-level
/// `return_logprob` true and `stream` not true. (False for anything that is not a JSON object.)
bool WantsInputLogprobs(std::string_view body);

/// Decode's SGLang answer with prefill's `meta_info.input_token_logprobs` put before its own:
/// prefill computed the prompt's logprobs, decode only those after it (SGLang's gateway merges
/// them the same way). Decode's answer unchanged when either lacks the list.
/// @return kInvalidArgument when either is not a JSON object.
absl::StatusOr<std::string> MergeInputLogprobs(std::string_view prefill, std::string_view decode);

/// A host as it goes in a URL or a bootstrap field: IPv6 literals in brackets.
std::string BracketHost(std::string_view host);

/// Top-level members that tell an engine where to move KV (vLLM's `kv_transfer_params`,
/// SGLang's bootstrap rendezvous). Only kvgate sets them: a client's would make a worker
/// connect to a host and port of the client's choosing, or answer for another request.
inline constexpr std::string_view kTransferFields[] = {"kv_transfer_params", "bootstrap_host",
                                                       "bootstrap_port", "bootstrap_room",
                                                       "disagg_prefill_dp_rank"};

/// `body` without kTransferFields, or nullopt when it has none of them (or is not one JSON
/// object: the request path reports that). A byte scan rules most bodies out unparsed.
std::optional<std::string> DropTransferFields(std::string_view body);

/// The top-level `kv_transfer_params` of prefill's JSON response, as raw JSON.
/// @return kNotFound when absent or null (prefill did not export its KV: decode would
///         recompute), kInvalidArgument for a body that is not a JSON object.
absl::StatusOr<std::string> KvTransferParamsOf(std::string_view response);

}  // namespace kvgate::router::pd
