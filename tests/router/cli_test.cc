#include "router/cli.h"

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

TEST(Cli, Flags) {
  auto o = Parse({"--check", "--help", "--version"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->check && o->help && o->version);
  EXPECT_THAT(CliUsage(), HasSubstr("--worker URL"));
}

}  // namespace
}  // namespace kvgate::router
