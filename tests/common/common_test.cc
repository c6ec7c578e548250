#include "common/json_util.h"
#include "common/strings.h"
#include "common/url.h"
#include "gtest/gtest.h"

namespace kvgate::common {
namespace {

TEST(Url, ParsesHostPortAndPath) {
  auto u = ParseHttpUrl("http://worker-1.ns.svc:8080/base/");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->host, "worker-1.ns.svc");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "/base");
  EXPECT_EQ(u->ToString(), "http://worker-1.ns.svc:8080/base");
  EXPECT_EQ(u->Authority(), "worker-1.ns.svc:8080");
}

TEST(Url, DefaultsPortAndHandlesIpv6) {
  EXPECT_EQ(ParseHttpUrl("http://h")->port, 80);
  auto v6 = ParseHttpUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->Authority(), "[::1]:9000");
}

TEST(Url, RejectsBadInput) {
  for (const char* bad : {"", "localhost:80", "https://h:1", "http://:80", "http://h:99999",
                          "http://h:0", "http://u@h:1", "http://h:x"}) {
    EXPECT_FALSE(ParseHttpUrl(bad).ok()) << bad;
  }
}

TEST(HostPort, Parses) {
  auto hp = ParseHostPort("127.0.0.1:0");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->second, 0);
  EXPECT_FALSE(ParseHostPort("nohost").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
}

TEST(Json, EscapesControlAndQuotes) {
  std::string out;
  AppendJsonString(out, "a\"b\\c\n\x01");
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001")");
}

TEST(Json, OpenAiErrorBody) {
  EXPECT_EQ(
      OpenAiErrorBody("bad \"x\"", "invalid_request_error", "c1"),
      R"({"error":{"message":"bad \"x\"","type":"invalid_request_error","param":null,"code":"c1"}})");
  EXPECT_NE(OpenAiErrorBody("m", "t", "").find(R"("code":null)"), std::string::npos);
}

TEST(Strings, CatJoinAndParse) {
  std::string_view sv = "sv";
  absl::string_view av = "av";
  EXPECT_EQ(StrCat("a", sv, av, 42, '-', uint64_t{7}), "asvav42-7");
  EXPECT_EQ(StrJoin(std::vector<std::string>{"x", "y"}, ", "), "x, y");
  uint64_t v = 0;
  EXPECT_TRUE(ParseUint64("123", &v));
  EXPECT_EQ(v, 123u);
  EXPECT_FALSE(ParseUint64("12x", &v));
  EXPECT_FALSE(ParseUint64("-1", &v));
  double d = 0;
  EXPECT_TRUE(ParseDouble("0.25", &d));
  EXPECT_FALSE(ParseDouble("1e", &d));
}

}  // namespace
}  // namespace kvgate::common
