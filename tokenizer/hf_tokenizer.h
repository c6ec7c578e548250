// File: tokenizer/hf_tokenizer.h
// A model's own tokenizer, loaded from the files Hugging Face ships (tokenizer.json,
// tokenizer_config.json, optional chat_template.jinja), producing the token ids the `tokenizers`
// library and transformers produce: added/special tokens split out first (with their
// single_word / lstrip / rstrip / normalized flags), then the normalizer, the pre-tokenizer and
// the BPE model on the rest, then the post-processor (or, for the Llama and Gemma tokenizer
// classes, transformers' `add_bos_token` / `add_eos_token` rule). Chat requests are rendered
// through the model's chat template (tokenizer/chat_template.h) and tokenised incrementally
// (tokenizer/incremental.h). See docs/precise-mode.md. Immutable after Load: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tokenizer {

class ChatTemplate;
class IncrementalCache;

namespace hf {
class BpeModel;
class Normalizer;
class PreTokenizer;
struct AddedVocab;
}  // namespace hf

/// Where a model's tokenizer files are. Empty paths default to `dir`/<the usual name>.
struct HfTokenizerFiles {
  std::string dir;
  std::string tokenizer_json;    // required (default dir/tokenizer.json)
  std::string tokenizer_config;  // optional (default dir/tokenizer_config.json, if present)
  std::string chat_template;     // optional (default dir/chat_template.jinja, if present)
};

/// The special tokens a chat template sees (bos_token, eos_token, ...), as strings.
struct SpecialTokensMap {
  std::vector<std::pair<std::string, std::string>> named;  // ("bos_token", "<s>"), ...
  std::vector<std::string> additional;                     // additional_special_tokens
};

class HfTokenizer final : public Tokenizer {
 public:
  /// Loads and validates the files. @return kNotFound for a missing tokenizer.json,
  /// kInvalidArgument naming the first unsupported or malformed part (a model type other than
  /// BPE, an unknown normalizer, a regex that does not compile, ...). A chat template outside
  /// the supported subset is not an error here: chat_template_status() says why, and chat
  /// requests then fail TokenizeChat (callers route them approximately).
  static absl::StatusOr<std::shared_ptr<const HfTokenizer>> Load(const HfTokenizerFiles& files);

  ~HfTokenizer() override;
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  std::string_view name() const override { return name_; }
  /// Token prompts pass through; text prompts are encoded with the special tokens a
  /// completions request gets (add_special_tokens = true). A chat prompt's canonical bytes are
  /// not what the engine tokenises: kInvalidArgument (use TokenizeChat).
  absl::Status Tokenize(const kvindex::CanonicalPrompt& prompt,
                        std::vector<uint32_t>* out) const override;
  using Tokenizer::TokenizeChat;
  absl::Status TokenizeChat(std::string_view body, const ChatLayout* layout,
                            std::vector<uint32_t>* out) const override;

  /// Hugging Face's `tokenizer.encode(text, add_special_tokens=...)`; appends to `*out`
  /// (cleared first). @return kInvalidArgument for text that is not valid UTF-8.
  absl::Status Encode(std::string_view text, bool add_special_tokens,
                      std::vector<uint32_t>* out) const;

  /// Renders the chat template for an OpenAI chat-completions body (messages normalised as
  /// vLLM does). `reuse`: replay the loop iterations earlier renders share (jinja_memo.h).
  /// @return kFailedPrecondition when the model has no usable template, or the template's
  ///         error (raise_exception, an undefined call, ...).
  absl::Status RenderChat(std::string_view body, std::string* rendered, bool* add_special_tokens,
                          bool reuse = true, const ChatLayout* layout = nullptr) const;
  /// Renders and tokenises a chat body from scratch (no replayed iterations, no incremental
  /// cache): the reference the incremental path is tested against.
  absl::Status TokenizeChatFull(std::string_view body, std::vector<uint32_t>* out) const;

  /// Encodes the text segment `text[from, to)` of a larger text, as if the whole text were
  /// encoded without special tokens: valid only when `from` is a cut point (see
  /// CutPoints). Appends to `*out`.
  absl::Status EncodeRange(std::string_view text, size_t from, size_t to,
                           std::vector<uint32_t>* out) const;
  /// Offsets in `text` before which the ids of text[0, p) never depend on what follows p: the
  /// starts of non-normalized added tokens that have no lstrip and are matched there.
  void CutPoints(std::string_view text, std::vector<size_t>* out) const;

  bool has_chat_template() const { return template_ != nullptr; }
  bool HasChatTemplate() const override { return has_chat_template(); }
  const absl::Status& chat_template_status() const { return template_status_; }
  /// The chat template (its caches' statistics), or null.
  const ChatTemplate* chat_template() const { return template_.get(); }
  const SpecialTokensMap& special_tokens() const { return special_tokens_; }
  std::optional<uint32_t> TokenToId(std::string_view token) const;
  /// Incremental cache counters (for tests and benchmarks).
  struct CacheStats {
    uint64_t hits = 0, misses = 0, reused_bytes = 0, encoded_bytes = 0;
  };
  CacheStats cache_stats() const;

 private:
  class Loader;  // Load's steps (hf_load.cc)
  HfTokenizer();
  absl::Status EncodeSegments(std::string_view text, bool origin0,
                              std::vector<uint32_t>* out) const;
  void EncodeText(std::string_view text, bool origin0, std::vector<uint32_t>* out) const;

  std::string name_;
  std::unique_ptr<hf::AddedVocab> added_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::BpeModel> model_;
  std::vector<uint32_t> prefix_ids_;  // post-processor, with add_special_tokens
  std::vector<uint32_t> suffix_ids_;
  SpecialTokensMap special_tokens_;
  std::unique_ptr<ChatTemplate> template_;
  absl::Status template_status_;
  std::unique_ptr<IncrementalCache> cache_;
};

}  // namespace kvgate::tokenizer
