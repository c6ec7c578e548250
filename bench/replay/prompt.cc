#include "bench/replay/prompt.h"

#include <algorithm>
#include <utility>

#include "common/json_util.h"
#include "common/strings.h"
#include "xxhash.h"

namespace kvgate::replay {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void AppendSampling(std::string* out, uint64_t output_tokens, const BodyOptions& options) {
  common::StrAppend(out, ",\"max_tokens\":", MaxTokens(output_tokens, options),
                    ",\"ignore_eos\":true,\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true}}");
}

}  // namespace

uint64_t MaxTokens(uint64_t output_tokens, const BodyOptions& options) {
  const uint64_t tokens = std::max<uint64_t>(output_tokens, 1);
  return options.max_output_tokens > 0 ? std::min(tokens, options.max_output_tokens) : tokens;
}

void AppendBlockText(std::string_view ns, uint64_t id, uint32_t tokens, std::string* out) {
  // Seed from (namespace, id); each token is a three-letter word and a space.
  uint64_t state = XXH3_64bits_withSeed(ns.data(), ns.size(), id);
  const size_t start = out->size();
  out->resize(start + size_t{tokens} * kBytesPerToken);
  char* p = out->data() + start;
  for (uint32_t i = 0; i < tokens; ++i) {
    uint64_t x = SplitMix64(&state);
    p[0] = static_cast<char>('a' + x % 26);
    p[1] = static_cast<char>('a' + (x / 26) % 26);
    p[2] = static_cast<char>('a' + (x / 676) % 26);
    p[3] = ' ';
    p += kBytesPerToken;
  }
}

std::string BlockText(std::string_view ns, uint64_t id, uint32_t tokens) {
  std::string out;
  AppendBlockText(ns, id, tokens, &out);
  return out;
}

std::string MooncakePrompt(const MooncakeRequest& request) {
  std::string prompt;
  prompt.reserve(request.input_length * kBytesPerToken);
  uint64_t remaining = request.input_length;
  for (size_t i = 0; i < request.hash_ids.size() && remaining > 0; ++i) {
    // The last block takes whatever the input length leaves (partial, or longer if the trace
    // under-counts blocks).
    const bool last = i + 1 == request.hash_ids.size();
    const uint64_t tokens = last ? remaining : std::min<uint64_t>(remaining, kMooncakeBlockTokens);
    AppendBlockText(kMooncakeNamespace, request.hash_ids[i], static_cast<uint32_t>(tokens),
                    &prompt);
    remaining -= tokens;
  }
  return prompt;
}

std::string CompletionsBody(std::string_view prompt, uint64_t output_tokens,
                            const BodyOptions& options) {
  std::string body;
  body.reserve(prompt.size() + 256);
  body.append("{\"model\":");
  common::AppendJsonString(body, options.model);
  body.append(",\"prompt\":");
  common::AppendJsonString(body, prompt);
  AppendSampling(&body, output_tokens, options);
  return body;
}

std::string ChatBody(const std::vector<ChatMessage>& messages, uint64_t output_tokens,
                     const BodyOptions& options) {
  size_t size = 256;
  for (const auto& m : messages) size += m.content.size() + 32;
  std::string body;
  body.reserve(size);
  body.append("{\"model\":");
  common::AppendJsonString(body, options.model);
  body.append(",\"messages\":[");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) body.push_back(',');
    body.append("{\"role\":");
    common::AppendJsonString(body, messages[i].role);
    body.append(",\"content\":");
    common::AppendJsonString(body, messages[i].content);
    body.push_back('}');
  }
  body.push_back(']');
  AppendSampling(&body, output_tokens, options);
  return body;
}

AgentConversation::AgentConversation(std::string ns, uint64_t prefix_blocks, bool share_prefix)
    : ns_(std::move(ns)), prefix_blocks_(prefix_blocks), share_prefix_(share_prefix) {}

std::string AgentConversation::BlocksText(const std::vector<uint64_t>& ids, size_t begin,
                                          size_t end) const {
  std::string text;
  text.reserve((end - begin) * kAgenticBlockTokens * kBytesPerToken);
  for (size_t i = begin; i < end; ++i) {
    const bool shared = share_prefix_ && i < prefix_blocks_;
    AppendBlockText(shared ? kSharedPrefixNamespace : std::string_view(ns_), ids[i],
                    kAgenticBlockTokens, &text);
  }
  return text;
}

void AgentConversation::Restart(const AgentRequest& request) {
  messages_.clear();
  const auto& ids = request.hash_ids;
  const size_t prefix = std::min<size_t>(prefix_blocks_, ids.size());
  messages_.push_back({"system", BlocksText(ids, 0, prefix)});
  messages_.push_back({"user", BlocksText(ids, prefix, ids.size())});
  first_block_ = {0, prefix};
}

void AgentConversation::Rewrite(const AgentRequest& request, size_t changed) {
  size_t m = messages_.size() - 1;
  while (m > 0 && (first_block_[m] == kAnswer || first_block_[m] > changed)) --m;
  if (m == 0) return Restart(request);  // not after the system prompt's blocks
  messages_.resize(m + 1);
  first_block_.resize(m + 1);
  messages_[m].content = BlocksText(request.hash_ids, first_block_[m], request.hash_ids.size());
}

const std::vector<ChatMessage>& AgentConversation::NextTurn(const AgentRequest& request) {
  const auto& ids = request.hash_ids;
  const size_t common = static_cast<size_t>(
      std::mismatch(previous_ids_.begin(), previous_ids_.end(), ids.begin(), ids.end()).first -
      previous_ids_.begin());
  const size_t prefix = std::min<size_t>(prefix_blocks_, previous_ids_.size());
  if (!started_ || common < prefix || (common == prefix && common < previous_ids_.size())) {
    Restart(request);  // the system prompt changed, or nothing after it is kept
  } else if (common < previous_ids_.size()) {
    Rewrite(request, common);
  } else {
    messages_.push_back({"assistant", std::move(pending_answer_)});
    messages_.push_back({"user", BlocksText(ids, previous_ids_.size(), ids.size())});
    first_block_.push_back(kAnswer);
    first_block_.push_back(previous_ids_.size());
  }
  pending_answer_.clear();
  previous_ids_ = ids;
  started_ = true;
  return messages_;
}

void AgentConversation::SetAnswer(std::string text) { pending_answer_ = std::move(text); }

}  // namespace kvgate::replay
