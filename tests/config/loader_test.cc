#include "config/loader.h"

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::config {
namespace {

using ::testing::HasSubstr;

std::string Error(std::string_view yaml) {
  auto c = LoadConfigFromString(yaml, "test.yaml");
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << yaml;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigLoader, EmptyDocumentGivesDefaults) {
  auto c = LoadConfigFromString("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_port, 8000);
  EXPECT_EQ(c->limits.max_body_bytes, 32ull << 20);
  EXPECT_EQ(c->routing.policy, "kvaware");
  EXPECT_TRUE(c->workers.empty());
}

TEST(ConfigLoader, FullWorkerEntry) {
  auto c = LoadConfigFromString(R"(
listen: "127.0.0.1:9000"
routing: {policy: least_request}
workers:
  - url: http://10.1.2.3:8000/
    models: [a, b]
    role: prefill
    dp_size: 4
    weight: 2.5
)",
                                "t.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_host, "127.0.0.1");
  EXPECT_EQ(c->listen_port, 9000);
  EXPECT_EQ(c->routing.policy, "least_request");
  ASSERT_EQ(c->workers.size(), 1u);
  const WorkerConfig& w = c->workers[0];
  EXPECT_EQ(w.url.ToString(), "http://10.1.2.3:8000");
  EXPECT_EQ(w.models, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(w.role, WorkerRole::kPrefill);
  EXPECT_EQ(w.dp_size, 4u);
  EXPECT_DOUBLE_EQ(w.weight, 2.5);
}

TEST(ConfigLoader, UnknownTopLevelKeyNamesKeyAndLine) {
  const std::string e = Error("threads: 2\nlisten_port: 80\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:2"));
  EXPECT_THAT(e, HasSubstr("listen_port"));
  EXPECT_THAT(e, HasSubstr("unknown key"));
}

TEST(ConfigLoader, UnknownNestedKeyNamesPath) {
  const std::string e = Error("limits:\n  max_body_byte: 10\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:2"));
  EXPECT_THAT(e, HasSubstr("limits.max_body_byte"));
}

TEST(ConfigLoader, WrongTypeNamesKeyAndLine) {
  const std::string e = Error("threads: 1\nlimits:\n  max_body_bytes: lots\n");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("limits.max_body_bytes"));
  EXPECT_THAT(e, HasSubstr("lots"));
}

TEST(ConfigLoader, NegativeNumberRejected) {
  EXPECT_THAT(Error("threads: -1\n"), HasSubstr("threads"));
}

TEST(ConfigLoader, OutOfRangeRejected) {
  EXPECT_THAT(Error("retry:\n  max_attempts: 100\n"), HasSubstr("retry.max_attempts"));
}

TEST(ConfigLoader, BadUrlNamesWorkerIndexAndLine) {
  const std::string e = Error(R"(workers:
  - url: http://ok:1
  - url: ftp://nope:21
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("workers[1].url"));
  EXPECT_THAT(e, HasSubstr("scheme must be http"));
}

TEST(ConfigLoader, UrlWithoutSchemeRejected) {
  EXPECT_THAT(Error("workers:\n  - url: 10.0.0.1:8000\n"), HasSubstr("workers[0].url"));
}

TEST(ConfigLoader, DuplicateWorkerNamesBoth) {
  const std::string e = Error(R"(workers:
  - url: http://a:8000
  - url: http://a:8000/
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:3"));
  EXPECT_THAT(e, HasSubstr("workers[1].url"));
  EXPECT_THAT(e, HasSubstr("duplicate worker 'http://a:8000'"));
}

TEST(ConfigLoader, MissingUrl) {
  EXPECT_THAT(Error("workers:\n  - models: [x]\n"), HasSubstr("workers[0].url: is required"));
}

TEST(ConfigLoader, BadRoleAndPolicy) {
  const std::string e = Error(R"(routing:
  policy: magic
workers:
  - url: http://a:1
    role: both
)");
  EXPECT_THAT(e, HasSubstr("test.yaml:2: routing.policy: unknown policy 'magic'"));
  EXPECT_THAT(e, HasSubstr("test.yaml:5: workers[0].role"));
}

TEST(ConfigLoader, ReportsEveryErrorAtOnce) {
  const std::string e = Error("threads: x\nlog_level: loud\nbogus: 1\n");
  EXPECT_THAT(e, HasSubstr("threads"));
  EXPECT_THAT(e, HasSubstr("log_level"));
  EXPECT_THAT(e, HasSubstr("bogus"));
}

TEST(ConfigLoader, InvalidYamlSyntax) {
  EXPECT_THAT(Error("workers: [\n"), HasSubstr("invalid YAML"));
}

TEST(ConfigLoader, MissingFile) {
  auto c = LoadConfigFromFile("/nonexistent/kvgate.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/nonexistent/kvgate.yaml"));
}

TEST(ConfigLoader, ExampleConfigLoads) {
  auto c = LoadConfigFromFile(std::string(KVGATE_TEST_SOURCE_DIR) + "/config/kvgate.example.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->workers.size(), 2u);
  EXPECT_TRUE(ValidateConfig(*c).ok());
}

TEST(ConfigValidate, DuplicateFromCommandLine) {
  Config c;
  WorkerConfig w;
  w.url = *common::ParseHttpUrl("http://x:1");
  c.workers = {w, w};
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("duplicate worker"));
}

}  // namespace
}  // namespace kvgate::config
