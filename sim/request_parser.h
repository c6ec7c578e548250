// File: sim/request_parser.h
// Reads a chat or text completions body into what the engine runs: the prompt's tokens, through
// kvgate's own canonicaliser and BytesToTokens4 (standing in for the chat template and the
// tokenizer, so that the gateway's bytes4 tokenizer predicts the engine's blocks exactly), and the
// fields that shape the answer. The agents' APIs come here too, as the chat body they convert to.
// Thread-compatible: one per worker (it reuses its parser and buffers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvindex/canonicalize.h"
#include "sim/cli.h"
#include "simdjson.h"

namespace kvgate::sim {

/// What a completion request asked for.
struct ParsedRequest {
  kvindex::ApiKind api = kvindex::ApiKind::kChatCompletions;
  bool stream = false;
  bool include_usage = false;
  uint32_t max_tokens = 0;  // --default-max-tokens when the body has none
  std::string model;
  std::vector<uint32_t> prompt;
};

class RequestParser {
 public:
  explicit RequestParser(const SimOptions& options) : o_(options) {}

  /// @return kInvalidArgument (the 400's message) for a body that is not a JSON object, a bad
  /// max_tokens, not exactly one prompt, or an empty one.
  absl::Status Parse(const std::string& body, kvindex::ApiKind api, ParsedRequest* out);

 private:
  const SimOptions& o_;
  kvindex::Canonicalizer canonicalizer_;
  kvindex::CanonicalRequest canonical_;
  simdjson::dom::parser json_;
};

}  // namespace kvgate::sim
