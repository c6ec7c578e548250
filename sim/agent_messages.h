// File: sim/agent_messages.h
// Anthropic Messages on kvgate-sim, as vLLM serves them (entrypoints/anthropic/serving.py):
// reading a /v1/messages (or count_tokens) body into an AgentCall, and the writer that renders
// the engine's tokens as a message (docs/simulator.md "POST /v1/messages"). AgentApi
// (agent_api.h) is the only caller. Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvindex/agent_chat.h"
#include "sim/agent_api.h"
#include "sim/cli.h"
#include "simdjson.h"

namespace kvgate::sim::agent {

/// Reads and converts a /v1/messages body (`count_only`: /v1/messages/count_tokens, which needs
/// no max_tokens); `converter` and `json` are the worker's, reused across requests.
AgentCall ReadMessages(std::string_view body, bool count_only, const SimOptions& o,
                       kvindex::AgentChatConverter& converter, simdjson::dom::parser& json);

/// The writer of a Messages call; `n` (the worker's request number) names its tool_use block.
std::unique_ptr<AnswerWriter> NewMessagesWriter(const SimOptions& o, const AgentCall& call,
                                                std::string_view request_id, uint32_t prompt_tokens,
                                                uint32_t max_tokens, uint64_t n);

/// count_tokens' answer for a prompt of `n` tokens.
std::string CountTokensBody(uint32_t n);

}  // namespace kvgate::sim::agent
