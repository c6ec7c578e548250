// File: kvindex/tokenizer.h
// The seam between a canonical prompt and the token ids an engine caches blocks of. Precise
// routing hashes requests in token mode so that its chains equal the chains kvgate rebuilds from
// the engines' BlockStored events; that only works when the gateway tokenises exactly as the
// engine does. Today the only text tokenizer is `bytes4` (kvgate-sim's rule: 4 bytes a token);
// one that loads a model's tokenizer.json plugs in here. Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvindex/canonicalize.h"

namespace kvgate::kvindex {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// The name it is configured by ("bytes4").
  virtual std::string_view name() const = 0;
  /// Appends the token ids the engine would see for `prompt` to `*out` (cleared first). Token
  /// prompts pass through unchanged; chat and text prompts are the canonical bytes, which stand
  /// in for the engine's chat template. @return kInvalidArgument when it cannot tokenise.
  virtual absl::Status Tokenize(const CanonicalPrompt& prompt,
                                std::vector<uint32_t>* out) const = 0;
};

/// kvgate-sim's tokenizer: each 4 consecutive bytes are one little-endian uint32 token; a final
/// partial group is zero-padded into one more token.
class Bytes4Tokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "bytes4"; }
  absl::Status Tokenize(const CanonicalPrompt& prompt, std::vector<uint32_t>* out) const override;
};

/// The tokenizer called `name`. @return kInvalidArgument listing the known names otherwise.
absl::StatusOr<std::shared_ptr<const Tokenizer>> MakeTokenizer(std::string_view name);

/// A process-wide instance of the stateless tokenizer called `name`, or nullptr (for the
/// request path, which must not allocate one per request).
const Tokenizer* TokenizerByName(std::string_view name);

}  // namespace kvgate::kvindex
