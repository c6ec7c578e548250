// libFuzzer target: the usage scanner, which reads token counts out of relayed bodies (JSON or
// SSE) chunk by chunk. Any input: no crash, counts -1 or more, and the same counts whether
// the body arrives whole or cut at any two points (a key split across chunks is still found), in
// every dialect, and the same response id. A scanner that keeps no id finds its keys by another
// path (the counts' common suffix, not every quote, and a suffix cut between chunks found from
// the carry): it must read the same counts, cut at the same points.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "router/upstream/usage_scanner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first two bytes choose where the body is cut.
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t a = body.empty() ? 0 : data[0] % (body.size() + 1);
  const size_t b = body.empty() ? 0 : a + data[1] % (body.size() - a + 1);
  using Scanner = kvgate::router::UsageScanner;
  for (const auto dialect :
       {Scanner::Dialect::kOpenAi, Scanner::Dialect::kAnthropic, Scanner::Dialect::kResponses}) {
    Scanner whole(dialect, true);
    whole.Feed(body);
    Scanner pieces(dialect, true);
    pieces.Feed(body.substr(0, a));
    pieces.Feed(body.substr(a, b - a));
    pieces.Feed(body.substr(b));
    if (whole.cached_tokens() < -1 || whole.prompt_tokens() < -1) __builtin_trap();
    if (whole.cached_tokens() != pieces.cached_tokens()) __builtin_trap();
    if (whole.prompt_tokens() != pieces.prompt_tokens()) __builtin_trap();
    if (whole.output_tokens() < -1 || whole.output_tokens() != pieces.output_tokens()) {
      __builtin_trap();
    }
    if (whole.response_id() != pieces.response_id()) __builtin_trap();
    Scanner counts_only(dialect, false);
    counts_only.Feed(body.substr(0, a));      // cut where the id-keeping one was: a short middle
    counts_only.Feed(body.substr(a, b - a));  // piece leaves a key's suffix in three chunks
    counts_only.Feed(body.substr(b));
    if (counts_only.cached_tokens() != whole.cached_tokens() ||
        counts_only.prompt_tokens() != whole.prompt_tokens() ||
        counts_only.output_tokens() != whole.output_tokens() ||
        !counts_only.response_id().empty()) {
      __builtin_trap();
    }
    if (whole.response_id().size() > Scanner::kMaxIdBytes) __builtin_trap();
  }
  return 0;
}
