// File: bench/replay/prompt.h
// Prompt synthesis for kvgate-replay: equal (namespace, hash id) pairs give byte-identical
// block text, so equal trace prefixes give equal canonical prompts at the gateway. One token is
// four bytes (a three-letter word and a space). See docs/replay.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/replay/trace.h"

namespace kvgate::replay {

/// Namespace of the tool/system prefix blocks when prefixes are shared across conversations.
inline constexpr std::string_view kSharedPrefixNamespace = "shared-prefix";
/// Namespace of Mooncake blocks (their ids are global).
inline constexpr std::string_view kMooncakeNamespace = "mooncake";
inline constexpr uint32_t kBytesPerToken = 4;

/// Appends the text of block (`ns`, `id`): 4 * `tokens` printable bytes derived from XXH3 of
/// the pair. Fewer tokens give a prefix of the full block's text. Pure; thread-safe.
void AppendBlockText(std::string_view ns, uint64_t id, uint32_t tokens, std::string* out);
std::string BlockText(std::string_view ns, uint64_t id, uint32_t tokens);

/// Sampling and API parameters shared by every synthesised request.
struct BodyOptions {
  std::string model = "sim-model";
  uint64_t max_output_tokens = 512;  // Cap on the trace's output length; 0 = no cap.
  bool thinking = false;             // Messages: extended thinking (--thinking).
  bool responses_store = false;      // Responses: store and chain turns (--responses-store).
};

/// The output token limit sent: `output_tokens` (at least 1) capped by max_output_tokens.
uint64_t MaxTokens(uint64_t output_tokens, const BodyOptions& options);

/// The /v1/completions prompt of a Mooncake request: its 512-token blocks in namespace
/// "mooncake", truncated to input_length tokens.
std::string MooncakePrompt(const MooncakeRequest& request);

/// A streaming /v1/completions body for `prompt`.
std::string CompletionsBody(std::string_view prompt, uint64_t output_tokens,
                            const BodyOptions& options);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant".
  std::string content;
};

/// A streaming /v1/chat/completions body for `messages`.
std::string ChatBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                     const BodyOptions& options);

/// The growing message list of one agentic (sub-)conversation:
///   system   = the first PrefixBlocks() blocks (namespace "shared-prefix" when shared,
///              else the conversation namespace);
///   then per turn k: a user message with the blocks beyond turn k-1's hash_ids, followed
///   (from turn k+1 on) by the assistant text the server actually returned for turn k.
/// When turn k's ids do not extend turn k-1's, the history is kept up to the user message
/// holding the first block that changed (a session rewrites the end of its last message more
/// often than it compacts: about 44 of the 55 such turns in the 52 sessions change only the
/// last one or two blocks), that message is rewritten from its first block to turn k's end, and the
/// messages after it, answers included, are dropped; so a cache keeps what the real session's
/// cache kept. When the change reaches into the prefix (compaction), the history restarts:
/// system + one user message with all non-prefix blocks.
/// Thread-compatible; one per running conversation.
class AgentConversation {
 public:
  /// `ns` is the namespace of non-prefix blocks (the root conversation id, shared by its
  /// sub-agents since they share its id space).
  AgentConversation(std::string ns, uint64_t prefix_blocks, bool share_prefix);

  /// Appends turn `request` to the history and returns the messages to send.
  const std::vector<ChatMessage>& NextTurn(const AgentRequest& request);
  /// Records the answer to the last turn; it precedes the next turn's new blocks.
  void SetAnswer(std::string text);

  const std::vector<ChatMessage>& messages() const { return messages_; }

 private:
  std::string BlocksText(const std::vector<uint64_t>& ids, size_t begin, size_t end) const;
  void Restart(const AgentRequest& request);
  // Keeps the messages before the user message holding block `changed` and rewrites that one.
  void Rewrite(const AgentRequest& request, size_t changed);

  std::string ns_;
  uint64_t prefix_blocks_;
  bool share_prefix_;
  std::vector<ChatMessage> messages_;
  // Per message, the index of its first block in the ids; kAnswer for an assistant message.
  std::vector<size_t> first_block_;
  static constexpr size_t kAnswer = static_cast<size_t>(-1);
  std::vector<uint64_t> previous_ids_;
  std::string pending_answer_;
  bool started_ = false;
};

}  // namespace kvgate::replay
