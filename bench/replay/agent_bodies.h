// File: bench/replay/agent_bodies.h
// The requests of the agents' own APIs, shaped as the agents shape them: Anthropic Messages as
// Claude Code 2.1 sends it (POST /v1/messages) and OpenAI Responses as Codex CLI sends it (POST
// /v1/responses). They are rendered from AgentConversation's chat history, so every API replays
// the same block text and the same returned answers. See docs/replay.md. Pure functions are
// thread-safe; AgentClient is thread-compatible (one per running conversation).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/replay/prompt.h"

namespace kvgate::replay {

/// The API a replay speaks. kDefault: completions for Mooncake traces, chat for agentic ones.
enum class Api { kDefault, kCompletions, kChat, kMessages, kResponses };

/// "completions", "chat", "messages", "responses" ("default" for kDefault).
std::string_view ApiName(Api api);
/// The inverse of ApiName for the four real APIs; false for any other name.
bool ParseApi(std::string_view name, Api* api);

/// One HTTP request: the path below the target's base path, headers besides the replayer's
/// own (host, content-type, accept, user-agent), and the body.
struct ApiRequest {
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

/// What an agent sends that identifies its session. Derived from hashes of the ids, so that a
/// replay is reproducible and every session differs.
struct AgentIdentity {
  std::string session_id;  // uuid-like: X-Claude-Code-Session-Id, metadata's session_id.
  std::string device_id;   // 64 hex digits: metadata's device_id.
  std::string billing;     // The text of Claude Code's x-anthropic-billing-header block.
  std::string thread_id;   // uuid-like: Codex's prompt_cache_key and session_id header.
  std::string call_tag;    // Tool call ids: toolu_<call_tag>_<k>, call_<call_tag>_<k>.
};

/// `session` is the agent session (Claude Code's Task sub-agents share their root's),
/// `conversation` the (sub-)conversation: it keys the Responses thread and the call ids.
AgentIdentity MakeAgentIdentity(std::string_view session, std::string_view conversation);

/// The Anthropic Messages body of `messages` (AgentConversation's list: system, then user,
/// assistant, user, ...). Turn 1 is a text block; each later answer becomes an assistant
/// message with its text and a Bash tool_use (toolu_<tag>_<k>), each later user message a
/// tool_result for it. cache_control marks the last block of the last message only.
std::string MessagesBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                         const AgentIdentity& identity, const BodyOptions& options);

/// The OpenAI Responses body of `messages`: `instructions` = the system text, `input` = a
/// developer message, the turn-1 user message, then per later turn the assistant's answer, a
/// shell function_call (call_<tag>_<k>) and its function_call_output. With a non-empty
/// `previous_response_id`, only the items of the last turn after its answer (the call and its
/// output; the answer is the stored response's) and `"store": true`.
std::string ResponsesBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                          const AgentIdentity& identity, const BodyOptions& options,
                          std::string_view previous_response_id);

/// The requests of one conversation in `api` (kChat, kMessages or kResponses).
class AgentClient {
 public:
  AgentClient(Api api, AgentIdentity identity, const BodyOptions& options);

  /// The request for the history `messages` (AgentConversation::NextTurn's result).
  ApiRequest NextTurn(const std::vector<ChatMessage>& messages, uint64_t output_tokens);
  /// The id of the response to the last turn (Responses); empty when it failed or had none.
  /// With options.responses_store, an extending next turn chains to it.
  void SetResponseId(std::string id) { previous_response_id_ = std::move(id); }

  const AgentIdentity& identity() const { return identity_; }

 private:
  Api api_;
  AgentIdentity identity_;
  BodyOptions options_;
  size_t previous_size_ = 0;  // Messages in the previous turn's history.
  std::string previous_response_id_;
};

/// A Mooncake request (one prompt, no history) in `api`; `id` keys its agent identity.
ApiRequest SingleTurnRequest(Api api, std::string prompt, uint64_t output_tokens,
                             const BodyOptions& options, std::string_view id);

}  // namespace kvgate::replay
