// File: kvindex/agent_chat.h
// The agents' own APIs as the engine's chat pipeline sees them. vLLM serves Anthropic Messages
// (/v1/messages) and OpenAI Responses (/v1/responses) by converting each request into chat
// messages and tools, then rendering its chat template over them as for /v1/chat/completions.
// kvgate applies the same conversion (vLLM main after v0.17: anthropic/serving.py and
// inline_system.py at a8c3bdb2, openai/responses/utils.py at 01ca842d; docs/agent-apis.md says
// what is and is not imitated), in one simdjson pass, so that:
//  - a conversation canonicalises to the same chained blocks whichever API carries it
//    (Canonicalizer with ApiKind::kMessages / kResponses);
//  - precise mode renders a model's chat template over the converted chat body;
//  - kvgate-sim serves both APIs with the prompt vLLM would build.
// Thread-compatible: keep one AgentChatConverter per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kvindex/canonicalize.h"

namespace kvgate::kvindex {

/// A request converted to chat: each message and the tools as chat-completions JSON.
struct ConvertedChat {
  std::string model;
  /// One JSON object per chat message, in order ({"role":...,"content":...,"tool_calls":...}).
  std::vector<std::string> messages;
  std::vector<std::string> roles;  // messages[i]'s role
  std::string tools;               // a JSON array of chat tools, or "" when none
  /// Non-empty when vLLM refuses the request's content (an Anthropic `document` block, an
  /// encrypted reasoning item, ...): the 400 an engine would answer.
  std::string unsupported;
};

/// Converts request bodies of the agents' APIs. Reuses its parser and buffers.
class AgentChatConverter {
 public:
  explicit AgentChatConverter(CanonicalizeOptions options = {});
  ~AgentChatConverter();
  AgentChatConverter(const AgentChatConverter&) = delete;
  AgentChatConverter& operator=(const AgentChatConverter&) = delete;

  /// Converts `body` (`api` is kMessages or kResponses) into `*out`.
  /// @return kInvalidArgument for malformed JSON, a field of the wrong type or a limit
  ///         exceeded (the same errors Canonicalizer::Canonicalize returns for the body).
  absl::Status Convert(std::string_view body, ApiKind api, ConvertedChat* out);

  /// Convert, then a chat-completions body of the converted messages and tools (and the
  /// request's `chat_template_kwargs`), what the engine's chat template renders.
  absl::Status ConvertToChatBody(std::string_view body, ApiKind api, std::string* out);

 private:
  std::unique_ptr<Canonicalizer::Impl> impl_;  // the canonicaliser's walk, in JSON mode
};

/// {"model":..., "messages":[...], "tools":[...]} from converted parts; `messages` are JSON
/// objects. `extra` (may be empty) is appended as further members (",\"key\":value...").
std::string ChatBodyOf(std::string_view model, const std::vector<std::string>& messages,
                       std::string_view tools, std::string_view extra = {});

/// Session-key helper for Claude Code's `metadata.user_id`: its `session_id` when the value is a
/// JSON object string carrying one, else the value itself.
std::string SessionIdOfUserId(std::string_view user_id);

}  // namespace kvgate::kvindex
