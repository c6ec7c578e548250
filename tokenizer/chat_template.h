// File: tokenizer/chat_template.h
// A model's chat template, rendered over an OpenAI chat-completions body the way vLLM serves
// it: messages normalised as vLLM's chat_utils does (content parts joined with "\n", or kept as
// {"type": "text"} parts when the template loops over content; null content; tool calls with
// their `arguments` parsed from JSON; tool results; `name`, `reasoning`), tools as vLLM dumps
// them, `add_generation_prompt` (default true), `continue_final_message`, `documents` and
// `chat_template_kwargs` (enable_thinking, ...), in transformers' environment (special tokens
// as variables, tojson, raise_exception, strftime_now). Immutable after Parse: thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/jinja.h"

namespace kvgate::tokenizer {

struct SpecialTokensMap;

class ChatTemplate {
 public:
  /// @return kInvalidArgument naming the construct outside the supported Jinja subset.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(std::string_view source);

  /// Renders `body` (a chat-completions request, or a kvgate-tokenize line with `messages`).
  /// `*add_special_tokens`: the body's `add_special_tokens` (default false, as vLLM's chat).
  /// @return kInvalidArgument for a body that is not JSON, lacks `messages`, holds
  ///         non-text content (images, audio) or makes the template fail.
  absl::Status RenderRequest(std::string_view body, const SpecialTokensMap& tokens,
                             std::string* out, bool* add_special_tokens) const;

  /// vLLM's "openai" content format (the template iterates message content).
  bool openai_content() const { return openai_content_; }

 private:
  ChatTemplate() = default;
  std::unique_ptr<jinja::Template> template_;
  bool openai_content_ = false;
};

}  // namespace kvgate::tokenizer
