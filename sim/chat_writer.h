// File: sim/chat_writer.h
// /v1/chat/completions and /v1/completions answers as vLLM renders them, whole or streamed
// (`data:` chunks, then [DONE]), from the engine's output tokens. The agents' APIs have their
// own writers (agent_api.h); the worker drives them all through AnswerWriter. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/types/span.h"
#include "sim/agent_api.h"

namespace kvgate::sim {

/// Chat (`chat`) or text completions.
class ChatWriter : public AnswerWriter {
 public:
  /// `include_usage`: stream_options.include_usage (a usage chunk before [DONE]).
  ChatWriter(bool chat, std::string_view request_id, std::string_view model, bool include_usage);

  std::string Whole(absl::Span<const uint32_t> tokens, const UsageCounts& usage,
                    std::string_view kv_params) override;
  void Begin(std::string* out) override;
  /// Each token's chunk; the last one carries finish_reason.
  void Token(uint32_t token, bool last, std::string* out) override;
  /// With stream_options.include_usage a usage chunk, then [DONE].
  void End(const UsageCounts& usage, std::string* out) override;

 private:
  const bool chat_;
  const std::string id_;
  const int64_t created_;
  const bool include_usage_;
  std::string model_;   // As a JSON string.
  std::string prefix_;  // Shared head of every chunk.
};

}  // namespace kvgate::sim
