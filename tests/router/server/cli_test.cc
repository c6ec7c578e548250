#include "router/server/cli.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<CliOptions> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "kvgate");
  return ParseCli(static_cast<int>(args.size()), args.data());
}

TEST(Cli, QuickStartWithoutConfigFile) {
  auto o = Parse({"--listen", "127.0.0.1:0", "--worker", "http://a:1", "--worker=http://b:2",
                  "--threads", "2", "--log-level", "debug", "--policy", "least_request"});
  ASSERT_TRUE(o.ok()) << o.status();
  auto c = BuildConfig(*o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_port, 0);
  ASSERT_EQ(c->workers.size(), 2u);
  EXPECT_EQ(c->workers[1].url.ToString(), "http://b:2");
  EXPECT_EQ(c->threads, 2u);
  EXPECT_EQ(c->routing.policy, "least_request");
}

TEST(Cli, Errors) {
  EXPECT_THAT(std::string(Parse({"--bogus"}).status().message()), HasSubstr("--bogus"));
  EXPECT_THAT(std::string(Parse({"--listen"}).status().message()), HasSubstr("needs a value"));
  EXPECT_THAT(std::string(Parse({"--threads", "many"}).status().message()), HasSubstr("--threads"));
  auto o = Parse({"--worker", "nope"});
  ASSERT_TRUE(o.ok());
  EXPECT_THAT(std::string(BuildConfig(*o).status().message()), HasSubstr("--worker"));
  auto dup = Parse({"--worker", "http://a:1", "--worker", "http://a:1"});
  EXPECT_THAT(std::string(BuildConfig(*dup).status().message()), HasSubstr("duplicate"));
  auto missing = Parse({"--config", "/nonexistent.yaml"});
  EXPECT_EQ(BuildConfig(*missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(Cli, ApiKeysAreKeptAsHashes) {
  auto o = Parse({"--worker", "http://a:1", "--api-key", "sk-one", "--api-key=sk-two"});
  ASSERT_TRUE(o.ok()) << o.status();
  auto c = BuildConfig(*o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->auth.api_keys.size(), 2u);
  EXPECT_EQ(c->auth.api_keys[0].name, "cli-1");
  EXPECT_EQ(c->auth.api_keys[1].name, "cli-2");
  // printf %s sk-one | sha256sum
  EXPECT_EQ(c->auth.api_keys[0].sha256,
            "456f1612bd25c6c8455039437bf441f43aa3b7d1c0b0047c712d5036dfebef0d");
  EXPECT_THAT(std::string(Parse({"--api-key="}).status().message()), HasSubstr("empty"));
}

TEST(Cli, Flags) {
  auto o = Parse({"--check", "--help", "--version"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->check && o->help && o->version);
  EXPECT_THAT(CliUsage(), HasSubstr("--worker URL"));
}

TEST(Cli, PdQuickStart) {
  auto o = Parse({"--pd-protocol", "sglang-bootstrap", "--prefill", "http://p1:30000", "9001",
                  "--prefill", "http://p2:30000", "--decode", "http://d1:30000"});
  ASSERT_TRUE(o.ok()) << o.status();
  auto c = BuildConfig(*o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pd.protocol, "sglang-bootstrap");
  ASSERT_EQ(c->workers.size(), 3u);
  EXPECT_EQ(c->workers[0].role, config::WorkerRole::kPrefill);
  EXPECT_EQ(c->workers[0].bootstrap_port, 9001);
  EXPECT_EQ(c->workers[1].bootstrap_port, 8998);
  EXPECT_EQ(c->workers[2].role, config::WorkerRole::kDecode);
  EXPECT_EQ(c->workers[2].url.ToString(), "http://d1:30000");

  auto bad = Parse({"--pd-protocol", "nixl", "--decode", "http://d:1"});
  ASSERT_TRUE(bad.ok());
  EXPECT_THAT(std::string(BuildConfig(*bad).status().message()), HasSubstr("--pd-protocol"));
  auto missing = Parse({"--prefill", "http://p:1", "--decode", "http://d:1"});
  ASSERT_TRUE(missing.ok());
  EXPECT_THAT(std::string(BuildConfig(*missing).status().message()),
              HasSubstr("need --pd-protocol"));
  EXPECT_THAT(std::string(Parse({"--prefill", "http://p:1", "0"}).status().message()),
              HasSubstr("bootstrap port"));
}

}  // namespace
}  // namespace kvgate::router
