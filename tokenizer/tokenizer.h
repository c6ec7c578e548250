// File: tokenizer/tokenizer.h
// The seam between a request and the token ids an engine caches blocks of. Precise routing
// hashes requests in token mode so that its chains equal the chains kvgate rebuilds from the
// engines' BlockStored events; that only works when the gateway tokenises exactly as the engine
// does. Two kinds: `bytes4` (kvgate-sim's rule: 4 bytes a token) and a model's own tokenizer
// loaded from a directory of Hugging Face files (tokenizer/hf_tokenizer.h), which also renders
// chat requests through the model's chat template. Implementations are thread-safe; loaded
// tokenizers live in a process-wide registry for the life of the process.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvindex/canonicalize.h"

namespace kvgate::tokenizer {

/// Where a chat body's `messages` elements lie, from a parse of the same bytes (the gateway's
/// canonicaliser records it for prefix reuse): element i runs from `begin` (i = 0) or just after
/// ends[i - 1] up to ends[i], JSON whitespace around it, and ends.back() is the array's `]`. A
/// chat template's read then skips the messages' JSON; a layout that does not fit the body is
/// ignored (the body is read as without one).
struct ChatLayout {
  size_t begin = 0;
  absl::Span<const uint32_t> ends;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The name it is configured by ("bytes4", or the tokenizer directory).
  virtual std::string_view name() const = 0;
  /// Appends the token ids the engine would see for `prompt` to `*out` (cleared first). Token
  /// prompts pass through unchanged. @return kInvalidArgument when it cannot tokenise.
  virtual absl::Status Tokenize(const kvindex::CanonicalPrompt& prompt,
                                std::vector<uint32_t>* out) const = 0;
  /// The token ids of a chat-completions request `body` as the engine computes them (its chat
  /// template rendered over the messages, then tokenised). @return kUnimplemented for a
  /// tokenizer without chat templates (callers then use Tokenize on the canonical prompt), or
  /// the render's error.
  /// `layout`: where the body's messages are, when known (null: found by reading the body).
  virtual absl::Status TokenizeChat(std::string_view body, const ChatLayout* layout,
                                    std::vector<uint32_t>* out) const;
  absl::Status TokenizeChat(std::string_view body, std::vector<uint32_t>* out) const {
    return TokenizeChat(body, nullptr, out);
  }
  /// True when TokenizeChat renders a chat template (false: callers tokenise the canonical
  /// prompt instead).
  virtual bool HasChatTemplate() const { return false; }
};

/// kvgate-sim's tokenizer: each 4 consecutive bytes are one little-endian uint32 token; a final
/// partial group is zero-padded into one more token. Chat prompts: the canonical bytes.
class Bytes4Tokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "bytes4"; }
  absl::Status Tokenize(const kvindex::CanonicalPrompt& prompt,
                        std::vector<uint32_t>* out) const override;
};

/// Whether `name` can name a tokenizer ("bytes4" or a directory path), without looking at any
/// file. @return kInvalidArgument listing the known names (MakeTokenizer's message).
absl::Status CheckTokenizerName(std::string_view name);

/// The tokenizer called `name`: "bytes4", or a directory holding tokenizer.json (and
/// optionally tokenizer_config.json and chat_template.jinja), loaded once and registered (a
/// later call reloads it when its files changed). @return kInvalidArgument listing the known
/// names, kNotFound for a missing directory, or the loader's error.
absl::StatusOr<std::shared_ptr<const Tokenizer>> MakeTokenizer(std::string_view name);

/// A registered tokenizer called `name` (bytes4 or one MakeTokenizer loaded), or nullptr. Cheap
/// (a shared lock and a lookup): for the request path.
const Tokenizer* TokenizerByName(std::string_view name);

/// True when `name` names a tokenizer directory rather than a built-in tokenizer.
bool IsTokenizerPath(std::string_view name);

}  // namespace kvgate::tokenizer
