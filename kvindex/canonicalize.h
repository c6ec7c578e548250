// File: kvindex/canonicalize.h
// Turns an OpenAI chat-completions or completions request body, or an agent API's (Anthropic
// Messages, OpenAI Responses: converted to chat as vLLM converts them, kvindex/agent_chat.h),
// into the canonical byte (or token) stream that block hashing consumes. The stream is independent
// of JSON whitespace, key order and escape spelling, and frames roles and messages unambiguously.
// See docs/kvindex.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvgate::kvindex {

/// What a canonical prompt holds, and how it is cut into blocks.
enum class PromptKind : uint8_t {
  kChat = 0,    // Framed chat stream (bytes); text-mode blocks.
  kText = 1,    // Raw completions prompt text (bytes); text-mode blocks.
  kTokens = 2,  // Token ids; token-mode blocks.
};

class BlockMemo;        // kvindex/block_memo.h
struct ReusablePrefix;  // kvindex/prefix_reuse.h

/// One canonical prompt. A value type; thread-compatible.
struct CanonicalPrompt {
  PromptKind kind = PromptKind::kChat;
  // The stream (kChat and kText). With prefix reuse its first `borrowed_bytes` may still be
  // where an earlier turn's entry holds them (`borrowed`), not copied: `bytes` is then the
  // rest. Read it whole with Text(), from an offset with From(), its length with size().
  std::string bytes;
  std::vector<uint32_t> tokens;  // kTokens.
  std::shared_ptr<const ReusablePrefix> borrowed;
  size_t borrowed_bytes = 0;
  mutable std::string joined;       // Text()'s join of a borrowed stream, made on first use
  mutable std::string joined_from;  // From()'s, when the offset is inside the borrowed bytes

  size_t size() const { return borrowed_bytes + bytes.size(); }
  /// The whole stream as one string.
  const std::string& Text() const;
  /// Bytes [offset, size()) as one view (past the borrowed part: `bytes` itself; inside it, a
  /// join of those bytes alone, valid until the next From()).
  std::string_view From(size_t offset) const;
  /// Copies the borrowed bytes in front of `bytes` (before an edit of the stream's front).
  void OwnAll();

  // Prefix reuse (kvindex/prefix_reuse.h), for HashPrompt: the previous turn's block hashes,
  // valid for this prompt's first `reused_bytes` bytes, and where this prompt's are kept for the
  // next turn. Null without prefix reuse.
  std::shared_ptr<const BlockMemo> reused_blocks;
  size_t reused_bytes = 0;
  std::shared_ptr<BlockMemo> blocks_memo;
};

/// The canonical form of one request, with the top-level fields routing needs. A value type;
/// thread-compatible.
struct CanonicalRequest {
  /// One prompt for chat; one per element for a completions batch (`prompt: [..., ...]`).
  std::vector<CanonicalPrompt> prompts;
  std::string model;       // Top-level "model" (a string when present).
  std::string cache_salt;  // Top-level "cache_salt", if a string.
  std::string user;        // Top-level "user", if a string.
  bool stream = false;     // Top-level "stream" (true, false or null).
  /// Parse() only: why the prompt could not be canonicalised although the body is valid JSON
  /// (no `messages`, a malformed content part, ...); `prompts` is then empty.
  std::string prompt_error;

  // The agents' APIs (kMessages, kResponses): session hints and stored-response state.
  std::string metadata_user_id;      // Messages: "metadata": {"user_id": ...} (a string)
  std::string prompt_cache_key;      // Responses
  std::string previous_response_id;  // Responses
  std::string conversation;          // Responses: "conversation" (a string, or its "id")
  bool store = true;                 // Responses: "store" (true unless false is sent)

  /// Prefix reuse: what this body's walk published (where each message lies in the body),
  /// for a chat template's read of the same body (tokenizer::ChatLayout). Null without it.
  std::shared_ptr<const ReusablePrefix> messages_layout;
};

/// kMessages: Anthropic /v1/messages (and count_tokens); kResponses: OpenAI /v1/responses.
/// kOther: any other JSON body (embeddings, ...): top-level fields only, no prompt.
enum class ApiKind : uint8_t { kChatCompletions, kCompletions, kMessages, kResponses, kOther };

/// Limits applied while canonicalising; exceeding one is kInvalidArgument.
class PrefixReuseCache;

struct CanonicalizeOptions {
  size_t max_body_bytes = size_t{64} << 20;
  int max_nesting_depth = 64;  // For tool schemas and other free-form JSON.
  /// Long chat-completions bodies: reuse what an earlier body with the same first messages
  /// made of them (kvindex/prefix_reuse.h). Null: every body is parsed whole.
  PrefixReuseCache* reuse = nullptr;
};

/// Framing bytes of the canonical chat stream. Content bytes in [0x00, kMaxFramingByte] are
/// written as kEscape followed by (byte | 0x40), so framing is never ambiguous.
namespace canonical {
inline constexpr char kEscape = 0x00;
inline constexpr char kMessageBegin = 0x01;  // Followed by a section tag ('r' role, 'x' tools).
inline constexpr char kField = 0x02;         // Followed by a field tag, then escaped content.
inline constexpr char kMessageEnd = 0x03;
inline constexpr char kObjectBegin = 0x04;  // Canonical JSON (tool schemas, odd parts).
inline constexpr char kObjectEnd = 0x05;
inline constexpr char kArrayBegin = 0x06;
inline constexpr char kArrayEnd = 0x07;
inline constexpr char kStringEnd = 0x08;  // Ends a JSON string or object key.
inline constexpr unsigned char kMaxFramingByte = 0x08;
}  // namespace canonical

/// Canonicalises request bodies with simdjson on-demand (no DOM of the body). Reuses its parser
/// and buffers across calls, so keep one per thread. Thread-compatible: not safe for concurrent
/// use of one instance.
class Canonicalizer {
 public:
  explicit Canonicalizer(CanonicalizeOptions options = {});
  ~Canonicalizer();
  Canonicalizer(const Canonicalizer&) = delete;
  Canonicalizer& operator=(const Canonicalizer&) = delete;

  /// Canonicalises `body` (a JSON object) into `*out`, reusing its buffers.
  /// @return kInvalidArgument for malformed JSON, wrong field types, missing `messages` /
  ///         `prompt`, or a limit exceeded. `*out` is unspecified after an error.
  absl::Status Canonicalize(std::string_view body, ApiKind api, CanonicalRequest* out);

  absl::StatusOr<CanonicalRequest> Canonicalize(std::string_view body, ApiKind api);

  /// Zero-copy variant: `body` must be followed by at least kPaddingBytes readable bytes (any
  /// values), e.g. a std::string reserved to size() + kPaddingBytes. Otherwise the body is
  /// copied into an internal padded buffer, as the overloads above always do.
  absl::Status CanonicalizePadded(std::string_view body, size_t capacity, ApiKind api,
                                  CanonicalRequest* out);

  /// The gateway's one pass over a request body: validates all of it (malformed JSON anywhere
  /// is an error), reads the top-level fields and, with `build_prompt`, the canonical prompt.
  /// `capacity` as for CanonicalizePadded (0: copy into a padded buffer).
  /// @return kInvalidArgument when the body is not one JSON object, is malformed anywhere, or
  ///         a top-level field has the wrong type ('model' not a string, 'stream' not a
  ///         boolean). A prompt that cannot be canonicalised is not an error here: see
  ///         CanonicalRequest::prompt_error.
  absl::Status Parse(std::string_view body, size_t capacity, ApiKind api, bool build_prompt,
                     CanonicalRequest* out);

  /// Bytes simdjson may read past the end of the body (SIMDJSON_PADDING).
  static const size_t kPaddingBytes;

 private:
  friend class AgentChatConverter;  // shares the walk (kvindex/agent_chat.h)
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// One-shot convenience (allocates a parser); prefer a long-lived Canonicalizer.
absl::StatusOr<CanonicalRequest> CanonicalizeRequest(std::string_view body, ApiKind api);

/// Appends `text` to `*out` with bytes in [0x00, kMaxFramingByte] escaped.
void AppendEscaped(std::string_view text, std::string* out);

}  // namespace kvgate::kvindex
