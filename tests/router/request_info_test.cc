#include "router/request_info.h"

#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

absl::StatusOr<RequestInfo> Parse(std::string body) { return ParseRequestInfo(body); }

TEST(RequestInfo, ExtractsModelStreamUser) {
  auto i = Parse(
      R"({"messages":[{"role":"user","content":"x"}],"model":"m\u00e9","stream":true,"user":"u1"})");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->model, "m\xc3\xa9");
  EXPECT_TRUE(i->stream);
  EXPECT_EQ(i->user, "u1");
}

TEST(RequestInfo, DefaultsWhenAbsent) {
  auto i = Parse(R"({"prompt":"hi","stream":null})");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->model, "");
  EXPECT_FALSE(i->stream);
}

TEST(RequestInfo, RejectsMalformedJson) {
  for (const char* bad :
       {"", "not json", "{", R"({"model":)", R"({"model":"m",})", R"({"a":[1,,2]})",
        R"({"a":{"b":tru}})", "[1,2]", R"({"model":"m"} trailing)", R"({"a":"\x"})"}) {
    EXPECT_FALSE(Parse(bad).ok()) << bad;
  }
}

TEST(RequestInfo, RejectsWrongFieldTypes) {
  EXPECT_FALSE(Parse(R"({"model":3})").ok());
  EXPECT_FALSE(Parse(R"({"stream":"yes"})").ok());
}

TEST(RequestInfo, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  deep = R"({"a":)" + deep;
  EXPECT_FALSE(Parse(deep).ok());
}

TEST(RequestInfo, BodyContentUnchanged) {
  std::string body = R"({"model":"m","x":[1,2,{"y":"z"}]})";
  const std::string copy = body;
  ASSERT_TRUE(ParseRequestInfo(body).ok());
  EXPECT_EQ(body, copy);
}

}  // namespace
}  // namespace kvgate::router
