// libFuzzer target for the request canonicaliser (chat and completions) and block hashing.
// Built and run by tests/fuzz/run_fuzzers.sh with clang++ -fsanitize=fuzzer,address,undefined.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvindex/block_hash.h"
#include "kvindex/canonicalize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::kvindex;
  static Canonicalizer* canonicalizer = new Canonicalizer();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  CanonicalRequest out;
  std::vector<BlockHash> chain;
  for (ApiKind api : {ApiKind::kChatCompletions, ApiKind::kCompletions}) {
    if (canonicalizer->Canonicalize(body, api, &out).ok()) {
      for (const CanonicalPrompt& p : out.prompts) {
        HashPrompt(p, NamespaceSeed({out.model, "", out.cache_salt}), HashOptions{}, &chain);
      }
    }
  }
  // The zero-copy path reads the caller's padding (ASan checks it stays inside it).
  std::string padded(body);
  padded.resize(size + Canonicalizer::kPaddingBytes);
  (void)canonicalizer->CanonicalizePadded(std::string_view(padded.data(), size), padded.size(),
                                          ApiKind::kChatCompletions, &out);
  return 0;
}
