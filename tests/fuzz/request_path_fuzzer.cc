// libFuzzer target: a client request as the gateway takes it in — the head through the
// session's parser, the body de-chunked by the framing tracker, then the prompt through the
// canonicaliser and block hashing, as /v1/chat/completions and /v1/completions. Any input: no
// crash, no sanitizer report, no read outside the request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"
#include "net/body_framing.h"
#include "net/http1.h"

namespace h = kvgate::router::http1;
namespace kv = kvgate::kvindex;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kv::Canonicalizer* canonicalizer = new kv::Canonicalizer();
  const std::string input(reinterpret_cast<const char*>(data), size);
  h::RequestHead head;
  h::ParseLimits limits;
  const h::ParseResult r = h::ParseRequestHead(input, limits, &head);
  if (r.status != h::ParseStatus::kComplete) return 0;
  h::BodyFraming framing(head.body, head.content_length);
  std::string body;
  size_t consumed = 0;
  const auto st = framing.Feed(std::string_view(input).substr(r.head_bytes), &consumed,
                               [&](std::string_view d) { body.append(d); });
  if (st != h::BodyFraming::Status::kDone && head.body != h::BodyKind::kNone) return 0;
  const kv::ApiKind api = head.path.ends_with("/chat/completions") ? kv::ApiKind::kChatCompletions
                                                                   : kv::ApiKind::kCompletions;
  kv::CanonicalRequest out;
  std::vector<kv::BlockHash> chain;
  if (canonicalizer->Canonicalize(body, api, &out).ok()) {
    for (const kv::CanonicalPrompt& p : out.prompts) {
      kv::HashPrompt(p, kv::NamespaceSeed({out.model, "", out.cache_salt}), kv::HashOptions{},
                     &chain);
    }
  }
  return 0;
}
