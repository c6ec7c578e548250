// File: sim/agent_responses.h
// OpenAI Responses on kvgate-sim, as vLLM serves them (entrypoints/openai/responses/, the
// non-Harmony path): reading a /v1/responses body into an AgentCall (a previous_response_id
// continues from this worker's ResponseStore, or is a 404), the writer that renders the engine's
// tokens as a response and stores it, and the endpoints that read or delete a stored response
// (docs/simulator.md "POST /v1/responses"). AgentApi (agent_api.h) is the only caller.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "kvindex/agent_chat.h"
#include "sim/agent_api.h"
#include "sim/cli.h"
#include "sim/response_store.h"
#include "simdjson.h"

namespace kvgate::sim::agent {

/// Reads and converts a /v1/responses body; the response is "resp_" + `request_id`.
/// `converter` and `json` are the worker's, reused across requests.
AgentCall ReadResponses(std::string_view body, std::string_view request_id, const SimOptions& o,
                        kvindex::AgentChatConverter& converter, simdjson::dom::parser& json,
                        ResponseStore& store);

/// The writer of a Responses call; it puts the finished response in `store` (`call.store`).
std::unique_ptr<AnswerWriter> NewResponsesWriter(const SimOptions& o, AgentCall call,
                                                 ResponseStore* store, uint32_t max_tokens);

/// GET and DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel and GET
/// /v1/responses/{id}/input_items (`path` without the query); nullopt for any other request.
std::optional<HttpAnswer> StoredEndpoint(ResponseStore& store, std::string_view method,
                                         std::string_view path, std::string_view query);

}  // namespace kvgate::sim::agent
