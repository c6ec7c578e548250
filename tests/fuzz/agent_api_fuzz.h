// File: tests/fuzz/agent_api_fuzz.h
// The check both agent-API fuzz targets run (messages_fuzzer.cc, responses_fuzzer.cc): any
// body, no crash; the direct walk and the converter agree on whether it is valid; and when it
// is, the converter's chat body is valid chat whose canonical stream is byte for byte the one
// the direct walk built (the property docs/agent-apis.md promises).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvindex/agent_chat.h"
#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"

inline int FuzzAgentApi(kvgate::kvindex::ApiKind api, const uint8_t* data, size_t size) {
  using namespace kvgate::kvindex;
  static Canonicalizer* direct = new Canonicalizer();
  static Canonicalizer* chat = new Canonicalizer();
  static AgentChatConverter* converter = new AgentChatConverter();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  CanonicalRequest walked;
  const bool ok = direct->Canonicalize(body, api, &walked).ok();
  std::string chat_body;
  if (converter->ConvertToChatBody(body, api, &chat_body).ok() != ok) __builtin_trap();
  if (ok) {
    CanonicalRequest via;
    if (!chat->Canonicalize(chat_body, ApiKind::kChatCompletions, &via).ok()) __builtin_trap();
    if (walked.prompts.size() != 1 || via.prompts.size() != 1) __builtin_trap();
    if (walked.prompts[0].bytes != via.prompts[0].bytes) __builtin_trap();
    std::vector<BlockHash> chain;
    HashPrompt(walked.prompts[0], NamespaceSeed({walked.model, "", walked.cache_salt}),
               HashOptions{}, &chain);
  }
  // The gateway's one pass (with and without the prompt): no crash whatever the verdict.
  CanonicalRequest parsed;
  (void)direct->Parse(body, 0, api, true, &parsed);
  (void)direct->Parse(body, 0, api, false, &parsed);
  (void)SessionIdOfUserId(parsed.metadata_user_id);
  return 0;
}
