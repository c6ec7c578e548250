#include "router/upstream/usage_scanner.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

TEST(UsageScanner, FindsUsageInJson) {
  UsageScanner s;
  s.Feed(
      R"({"usage":{"prompt_tokens":1200,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1024}}})");
  EXPECT_EQ(s.prompt_tokens(), 1200);
  EXPECT_EQ(s.cached_tokens(), 1024);
  EXPECT_EQ(s.output_tokens(), 5);
}

TEST(UsageScanner, AbsentIsMinusOne) {
  UsageScanner s;
  s.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n");
  EXPECT_EQ(s.cached_tokens(), -1);
  EXPECT_EQ(s.prompt_tokens(), -1);
  EXPECT_EQ(s.output_tokens(), -1);
}

// The output's size as each API names it: a chat stream's last usage chunk, the last of
// Anthropic's two usages (message_start says 1), Responses' beside its details object. A key
// that only begins with the name (`completion_tokens_details`) is not it.
TEST(UsageScanner, OutputTokensInEveryDialect) {
  const std::string chat =
      "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"usage\":"
      "{\"prompt_tokens\":90,\"completion_tokens\":311,\"completion_tokens_details\":"
      "{\"reasoning_tokens\":7}}}\n\ndata: [DONE]\n\n";
  const std::string messages =
      "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,"
      "\"output_tokens\":1}}}\n\ndata: {\"type\":\"message_delta\",\"usage\":"
      "{\"output_tokens\":42}}\n\n";
  const std::string responses =
      "data: {\"response\":{\"usage\":{\"input_tokens\":64,\"output_tokens\":3,"
      "\"output_tokens_details\":{\"reasoning_tokens\":0}}}}\n\n";
  const struct {
    UsageScanner::Dialect dialect;
    const std::string& body;
    int64_t output;
  } cases[] = {{UsageScanner::Dialect::kOpenAi, chat, 311},
               {UsageScanner::Dialect::kAnthropic, messages, 42},
               {UsageScanner::Dialect::kResponses, responses, 3},
               // Another API's name is not this one's.
               {UsageScanner::Dialect::kOpenAi, messages, -1},
               {UsageScanner::Dialect::kAnthropic, chat, -1}};
  for (const auto& c : cases) {
    for (size_t cut = 1; cut < c.body.size(); ++cut) {
      UsageScanner s(c.dialect);
      s.Feed(std::string_view(c.body).substr(0, cut));
      s.Feed(std::string_view(c.body).substr(cut));
      ASSERT_EQ(s.output_tokens(), c.output) << cut << " " << c.body;
    }
  }
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

// vLLM's Anthropic stream: message_start carries the whole prompt as input_tokens, the final
// message_delta the uncached rest beside the cache fields.
TEST(UsageScanner, AnthropicUsageAcrossEvents) {
  const std::string body =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-1\","
      "\"usage\":{\"input_tokens\":100,\"output_tokens\":0}}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
      "\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
      "\"end_turn\"},\"usage\":{\"input_tokens\":12,\"output_tokens\":5,"
      "\"cache_read_input_tokens\":80,\"cache_creation_input_tokens\":8}}\n\n";
  for (size_t cut = 1; cut < body.size(); cut += 7) {
    UsageScanner s(UsageScanner::Dialect::kAnthropic);
    s.Feed(std::string_view(body).substr(0, cut));
    s.Feed(std::string_view(body).substr(cut));
    EXPECT_EQ(s.cached_tokens(), 80) << cut;
    EXPECT_EQ(s.prompt_tokens(), 100) << cut;
  }
  // Cut off after message_start: the whole prompt, nothing known about the cache.
  UsageScanner start(UsageScanner::Dialect::kAnthropic);
  start.Feed(body.substr(0, body.find("event: content_block_delta")));
  EXPECT_EQ(start.prompt_tokens(), 100);
  EXPECT_EQ(start.cached_tokens(), -1);
}

TEST(UsageScanner, ResponsesUsageAndId) {
  const std::string body =
      "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,"
      "\"response\":{\"id\":\"resp_abc-123\",\"object\":\"response\",\"usage\":null}}\n\n"
      "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
      "\"item\":{\"id\":\"msg_x\"}}\n\n"
      "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":"
      "\"resp_abc-123\",\"usage\":{\"input_tokens\":64,\"input_tokens_details\":{\"cached_tokens"
      "\":48},\"output_tokens\":3,\"output_tokens_details\":{\"reasoning_tokens\":0}}}}\n\n";
  for (size_t cut = 1; cut < body.size(); ++cut) {
    UsageScanner s(UsageScanner::Dialect::kResponses, /*capture_id=*/true);
    s.Feed(std::string_view(body).substr(0, cut));
    s.Feed(std::string_view(body).substr(cut));
    ASSERT_EQ(s.response_id(), "resp_abc-123") << cut;
    EXPECT_EQ(s.cached_tokens(), 48) << cut;
    EXPECT_EQ(s.prompt_tokens(), 64) << cut;
  }
  UsageScanner no_capture(UsageScanner::Dialect::kResponses);
  no_capture.Feed(body);
  EXPECT_EQ(no_capture.response_id(), "");
  // An id that is not one (escapes, spaces, too long) is not kept.
  for (const std::string& odd :
       std::vector<std::string>{R"({"id":"a\"b"})", R"({"id":"a b"})", R"({"id":5})",
                                "{\"id\":\"" + std::string(300, 'x') + "\"}"}) {
    UsageScanner s(UsageScanner::Dialect::kResponses, true);
    s.Feed(odd);
    EXPECT_EQ(s.response_id(), "") << odd;
  }
}

// Feeds `body` to `scanner` in pieces of 1-40 bytes drawn from `rng`.
void FeedInRandomPieces(UsageScanner& scanner, std::string_view body, std::mt19937& rng) {
  for (size_t at = 0; at < body.size();) {
    const size_t n = 1 + rng() % 40;
    scanner.Feed(body.substr(at, n));
    at += n;
  }
}

void ExpectTheSameCounts(const UsageScanner& got, const UsageScanner& want, int round) {
  EXPECT_EQ(got.cached_tokens(), want.cached_tokens()) << round;
  EXPECT_EQ(got.prompt_tokens(), want.prompt_tokens()) << round;
  EXPECT_EQ(got.output_tokens(), want.output_tokens()) << round;
}

// Any split into pieces reads what one whole pass reads: every key of every dialect, each cut
// anywhere (the key search around a cut and the one inside a piece are different loops).
TEST(UsageScanner, RandomPiecesReadWhatTheWholeBodyReads) {
  const std::string body =
      "data: {\"id\":\"resp_9\",\"usage\":{\"prompt_tokens\": 77,\"prompt_tokens_details\":"
      "{\"cached_tokens\":48}}}\n\ndata: "
      "{\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\""
      ":80,\"cache_creation_input_tokens\":8,\"input_tokens_details\":{\"cached_tokens\":48}}}"
      "\"\"prompt_tokens\"prompt_tokens\":5,\"completion_tokens\":12,\"output_tokens\":13\n\n";
  std::mt19937 rng(31);
  for (const auto dialect : {UsageScanner::Dialect::kOpenAi, UsageScanner::Dialect::kResponses,
                             UsageScanner::Dialect::kAnthropic}) {
    UsageScanner whole(dialect, /*capture_id=*/true);
    whole.Feed(body);
    ASSERT_EQ(whole.response_id(), "resp_9");
    for (int round = 0; round < 300; ++round) {
      UsageScanner pieces(dialect, /*capture_id=*/true);
      FeedInRandomPieces(pieces, body, rng);
      ExpectTheSameCounts(pieces, whole, round);
      EXPECT_EQ(pieces.response_id(), whole.response_id()) << round;
    }
  }
}

// A scanner that keeps no id finds the counts from their common suffix; one still looking for
// the id (none comes here) tries every quote. Cut anywhere, both read the same counts, including
// overlapping keys, a key with no number and one that is not a key (`"xcompletion_tokens"`).
TEST(UsageScanner, WithoutTheIdTheCountsAreFoundTheSameWay) {
  const std::string body =
      "data: {\"usage\":{\"prompt_tokens\": 77,\"prompt_tokens_details\":{\"cached_tokens\":48}}}"
      "\n\ndata: {\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":80,"
      "\"cache_creation_input_tokens\":8,\"input_tokens_details\":{\"cached_tokens\":null}}}"
      "\"\"prompt_tokens\"prompt_tokens\":5,\"xcompletion_tokens\":9,\"completion_tokens\":12,"
      "\"output_tokens\" :\t13,\"_tokens\":3\n\n";
  std::mt19937 rng(37);
  for (const auto dialect : {UsageScanner::Dialect::kOpenAi, UsageScanner::Dialect::kResponses,
                             UsageScanner::Dialect::kAnthropic}) {
    UsageScanner quotes(dialect, /*capture_id=*/true);
    quotes.Feed(body);
    for (int round = 0; round < 300; ++round) {
      UsageScanner suffix(dialect, /*capture_id=*/false);
      FeedInRandomPieces(suffix, body, rng);
      ExpectTheSameCounts(suffix, quotes, round);
    }
  }
  UsageScanner openai(UsageScanner::Dialect::kOpenAi, false);
  openai.Feed(body);
  EXPECT_EQ(openai.prompt_tokens(), 5);
  EXPECT_EQ(openai.cached_tokens(), 48);
  EXPECT_EQ(openai.output_tokens(), 12);
  UsageScanner anthropic(UsageScanner::Dialect::kAnthropic, false);
  anthropic.Feed(body);
  EXPECT_EQ(anthropic.prompt_tokens(), 12 + 80 + 8);
  EXPECT_EQ(anthropic.cached_tokens(), 80);
  EXPECT_EQ(anthropic.output_tokens(), 13);
}

}  // namespace
}  // namespace kvgate::router
