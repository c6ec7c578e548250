// Tests of kvgate-replay's request sample (bench/replay/request_sample.h) and its flags: the
// reservoir keeps every request with the same chance, and its JSONL reads back as written.
#include "bench/replay/request_sample.h"

#include <array>
#include <sstream>

#include "bench/replay/cli.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"

namespace kvgate::replay {
namespace {

ApiRequest Numbered(int i) { return ApiRequest{"/v1/chat/completions", {}, std::to_string(i)}; }

TEST(RequestSampleTest, KeepsEveryRequestBelowCapacity) {
  RequestSample sample(5);
  for (int i = 0; i < 3; ++i) sample.Offer(Numbered(i));
  EXPECT_EQ(sample.offered(), 3u);
  ASSERT_EQ(sample.kept().size(), 3u);
  EXPECT_EQ(sample.kept()[2].body, "2");
}

TEST(RequestSampleTest, EveryRequestHasTheSameChance) {
  // 8 requests, 2 kept, over 4000 seeds: each request is kept 1000 times in expectation (a
  // scheme that favoured the first or the last ones would miss by hundreds).
  std::array<int, 8> kept{};
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    RequestSample sample(2, seed);
    for (int i = 0; i < 8; ++i) sample.Offer(Numbered(i));
    ASSERT_EQ(sample.kept().size(), 2u);
    EXPECT_NE(sample.kept()[0].body, sample.kept()[1].body);
    for (const ApiRequest& r : sample.kept()) ++kept[std::stoi(r.body)];
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_GT(kept[i], 850) << i;
    EXPECT_LT(kept[i], 1150) << i;
  }
}

TEST(RequestSampleTest, CapacityZeroKeepsNothing) {
  RequestSample sample(0);
  sample.Offer(Numbered(1));
  EXPECT_EQ(sample.offered(), 1u);
  EXPECT_TRUE(sample.kept().empty());
}

TEST(RequestSampleTest, JsonlReadsBackAsWritten) {
  const std::vector<ApiRequest> requests = {
      {"/v1/messages",
       {{"anthropic-version", "2023-06-01"}, {"x-quote", "a \"b\""}},
       R"({"model":"m","messages":[{"role":"user","content":"line\nnext"}]})"},
      {"/v1/chat/completions", {}, "{}"}};
  const std::string jsonl = RequestsToJsonl(requests);
  std::istringstream lines(jsonl);
  std::string line;
  size_t n = 0;
  simdjson::dom::parser parser;
  while (std::getline(lines, line)) {
    ASSERT_LT(n, requests.size());
    simdjson::dom::element doc;
    ASSERT_FALSE(parser.parse(line).get(doc)) << line;
    std::string_view path, body;
    ASSERT_FALSE(doc["path"].get_string().get(path));
    ASSERT_FALSE(doc["body"].get_string().get(body));
    EXPECT_EQ(path, requests[n].path);
    EXPECT_EQ(body, requests[n].body);
    simdjson::dom::object headers;
    ASSERT_FALSE(doc["headers"].get_object().get(headers));
    EXPECT_EQ(headers.size(), requests[n].headers.size());
    for (const auto& [k, v] : requests[n].headers) {
      std::string_view got;
      ASSERT_FALSE(headers[k].get_string().get(got)) << k;
      EXPECT_EQ(got, v);
    }
    ++n;
  }
  EXPECT_EQ(n, requests.size());
}

TEST(RequestSampleTest, Flags) {
  const std::vector<std::string> base = {"--target", "http://127.0.0.1:1", "--trace", "t.json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return ParseCommandLine(args);
  };
  auto plain = with({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->replay.connection_per_request);
  EXPECT_EQ(plain->replay.request_sample_size, 0u);
  auto sampled = with({"--request-sample", "s.jsonl", "--connection-per-request"});
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_TRUE(sampled->replay.connection_per_request);
  EXPECT_EQ(sampled->request_sample_path, "s.jsonl");
  EXPECT_EQ(sampled->replay.request_sample_size, 50u);
  auto sized = with({"--request-sample=s.jsonl", "--request-sample-size", "7"});
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(sized->replay.request_sample_size, 7u);
  auto zero = with({"--request-sample", "s.jsonl", "--request-sample-size", "0"});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()), ::testing::HasSubstr("request-sample-size"));
}

}  // namespace
}  // namespace kvgate::replay
