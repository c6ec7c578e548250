// libFuzzer target for prefix reuse (kvindex/prefix_reuse.h): a long chat, Messages or
// Responses body (the first input byte chooses), then a next turn made of its bytes and the
// fuzzer's, each canonicalised with the cache and by a full pass; any difference (status or
// canonical bytes, block hashes) aborts. The fuzzer's bytes are the messages after a long system
// prompt (so that the cache is used), whatever they are.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"
#include "kvindex/prefix_reuse.h"

namespace {

using namespace kvgate::kvindex;

void Compare(Canonicalizer& reusing, Canonicalizer& whole, const std::string& body, ApiKind api) {
  CanonicalRequest a, b;
  const absl::Status sa = reusing.Parse(body, 0, api, true, &a);
  const absl::Status sb = whole.Parse(body, 0, api, true, &b);
  if (sa != sb) std::abort();
  if (!sa.ok()) return;
  if (a.model != b.model || a.prompt_error != b.prompt_error ||
      a.prompts.size() != b.prompts.size()) {
    std::abort();
  }
  const uint64_t ns = NamespaceSeed({a.model, "", a.cache_salt});
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    // The reusing side's chain resumes from the previous turn's where it reused it (hashed
    // before Text() joins a borrowed prompt).
    if (HashPrompt(a.prompts[i], ns) != HashPrompt(b.prompts[i], ns)) std::abort();
    if (a.prompts[i].Text() != b.prompts[i].bytes) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static PrefixReuseCache* cache = new PrefixReuseCache(size_t{16} << 20);
  static Canonicalizer* reusing = new Canonicalizer(CanonicalizeOptions{.reuse = cache});
  static Canonicalizer* whole = new Canonicalizer();
  static const std::string prompt(PrefixReuseCache::kMinBodyBytes, 'a');
  static const std::string heads[] = {
      R"({"model":"m","messages":[{"role":"system","content":")" + prompt + R"("})",
      R"({"model":"m","system":")" + prompt + R"(","messages":[{"role":"user","content":"hi"})",
      R"({"model":"m","instructions":")" + prompt + R"(","input":[{"role":"user","content":"hi"})",
  };
  static const ApiKind apis[] = {ApiKind::kChatCompletions, ApiKind::kMessages,
                                 ApiKind::kResponses};
  if (size == 0) return 0;
  const size_t which = data[0] % 3;
  const std::string& head = heads[which];
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Input: first-turn messages, then '|', then what the next turn appends.
  const size_t bar = in.find('|');
  const std::string_view first = in.substr(0, bar);
  const std::string_view added = bar == std::string_view::npos ? "" : in.substr(bar + 1);
  const std::string turn1 = head + "," + std::string(first) + "]}";
  const std::string turn2 = head + "," + std::string(first) + "," + std::string(added) + "]}";
  Compare(*reusing, *whole, turn1, apis[which]);
  Compare(*reusing, *whole, turn2, apis[which]);
  return 0;
}
