// File: tokenizer/chat_template.h
// A model's chat template, rendered over an OpenAI chat-completions body the way vLLM serves
// it: messages normalised as vLLM's chat_utils does (content parts joined with "\n", or kept as
// {"type": "text"} parts when the template loops over content; null content; tool calls with
// their `arguments` parsed from JSON; tool results; `name`, `reasoning`), tools as vLLM dumps
// them, `add_generation_prompt` (default true), `continue_final_message`, `documents` and
// `chat_template_kwargs` (enable_thinking, ...), in transformers' environment (special tokens
// as variables, tojson, raise_exception, strftime_now). Immutable after Parse but for its caches
// of earlier requests' work (they lock): thread-safe.
//
// An agent re-sends its whole history every turn. A render that reuses (the default) reads the
// body without building its JSON tree: each message's raw bytes are looked up in a cache of the
// messages earlier requests normalised (bounded, two generations of 64 MiB of message bytes),
// and only new messages are parsed (where the gateway's parse of the same body found its
// messages, a ChatLayout, only the fields around them are read); the template then replays the
// loop iterations it rendered for them (jinja_memo.h). A body this cannot read (a message that
// is not an object, a field of an unexpected type, an error) is read in full, so errors and
// results are those of a full read.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "tokenizer/jinja.h"
#include "tokenizer/two_generations.h"

namespace kvgate::tokenizer {

struct ChatLayout;  // tokenizer/tokenizer.h
struct SpecialTokensMap;

class ChatTemplate {
 public:
  /// @return kInvalidArgument naming the construct outside the supported Jinja subset.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source);

  /// Renders `body` (a chat-completions request, or a kvgate-tokenize line with `messages`).
  /// `*add_special_tokens`: the body's `add_special_tokens` (default false, as vLLM's chat).
  /// `reuse`: replay loop iterations of earlier renders (jinja::Template::Render), and read
  /// messages through the message cache; `layout` (with `reuse`): where the messages are.
  /// @return kInvalidArgument for a body that is not JSON, lacks `messages`, holds
  ///         non-text content (images, audio) or makes the template fail.
  absl::Status RenderRequest(std::string_view body, const SpecialTokensMap& tokens,
                             std::string* out, bool* add_special_tokens, bool reuse = true,
                             const ChatLayout* layout = nullptr) const;
  /// Loop iterations replayed and rendered so far, and the bytes kept for replay.
  jinja::Template::ReuseStats reuse_stats() const { return template_->reuse_stats(); }
  /// Messages found in the message cache and parsed, bodies whose messages a layout placed,
  /// and the bytes the cache counts.
  struct MessageStats {
    uint64_t hits = 0, misses = 0, layouts = 0;
    size_t bytes = 0;
  };
  MessageStats message_stats() const;

  /// vLLM's "openai" content format (the template iterates message content).
  bool openai_content() const { return openai_content_; }

 private:
  struct Request;
  struct CachedMessage {
    jinja::Value value;  // normalised; immutable, shared by the requests that sent it
    jinja::ValueHash hash;
  };

  ChatTemplate() = default;
  static absl::Status ReadWhole(std::string_view body, bool openai, Request* r);
  // The body read without a JSON tree, messages from the cache; false: read it in full.
  bool ReadReusing(std::string_view body, const ChatLayout* layout, Request* r) const;
  // The messages given as raw JSON: found in the cache, or parsed, normalised and stored.
  bool ReadMessages(absl::Span<const std::string_view> raws, Request* r) const;

  std::unique_ptr<jinja::Template> template_;
  bool openai_content_ = false;
  mutable common::Mutex mu_;
  mutable TwoGenerations<jinja::ValueHash, CachedMessage> messages_ ABSL_GUARDED_BY(mu_){size_t{64}
                                                                                         << 20};
  mutable MessageStats message_stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvgate::tokenizer
