#include "router/upstream/usage_scanner.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(UsageScanner, FindsUsageInJson) {
  UsageScanner s;
  s.Feed(
      R"({"usage":{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1024}}})");
  EXPECT_EQ(s.prompt_tokens(), 1200);
  EXPECT_EQ(s.cached_tokens(), 1024);
}

TEST(UsageScanner, AbsentIsMinusOne) {
  UsageScanner s;
  s.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n");
  EXPECT_EQ(s.cached_tokens(), -1);
  EXPECT_EQ(s.prompt_tokens(), -1);
}

TEST(UsageScanner, KeySplitAcrossChunksEverywhere) {
  const std::string body =
      "data: {\"x\":1}\n\ndata: {\"usage\":{\"prompt_tokens\": 77, \"prompt_tokens_details\": "
      "{\"cached_tokens\": 48}}}\n\ndata: [DONE]\n\n";
  for (size_t cut = 1; cut < body.size(); ++cut) {
    UsageScanner s;
    s.Feed(std::string_view(body).substr(0, cut));
    s.Feed(std::string_view(body).substr(cut));
    EXPECT_EQ(s.cached_tokens(), 48) << cut;
    EXPECT_EQ(s.prompt_tokens(), 77) << cut;
  }
}

// A trickling worker: the body a byte at a time, so a key spans many pieces (the
// usage_scanner fuzzer found the scanner remembered only the last piece's tail).
TEST(UsageScanner, ByteAtATime) {
  const std::string body =
      "data: {\"usage\":{\"prompt_tokens\": 77, \"prompt_tokens_details\": "
      "{\"cached_tokens\": 48}}}\n\ndata: [DONE]\n\n";
  UsageScanner s;
  for (char c : body) s.Feed(std::string_view(&c, 1));
  EXPECT_EQ(s.cached_tokens(), 48);
  EXPECT_EQ(s.prompt_tokens(), 77);
}

TEST(UsageScanner, NullCachedTokensIgnored) {
  UsageScanner s;
  s.Feed(R"({"prompt_tokens_details":{"cached_tokens":null},"prompt_tokens":3})");
  EXPECT_EQ(s.cached_tokens(), -1);
  EXPECT_EQ(s.prompt_tokens(), 3);
}

}  // namespace
}  // namespace kvgate::router
