#include "router/runtime/access_log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvgate::router {
namespace {

using ::testing::HasSubstr;

TEST(AccessLog, FormatsOneJsonLine) {
  AccessRecord r;
  r.request_id = "abc";
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.model = "m\"x";
  r.worker = "http://w:1";
  r.status = 200;
  r.bytes_sent = 42;
  r.ttfb_seconds = 0.0125;
  r.e2e_seconds = 0.5;
  r.attempts = 2;
  r.cached_tokens = 64;
  r.prompt_tokens = 80;
  r.api = "responses";
  r.response_id = "resp_1";
  const std::string line = AccessLog::Format(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_THAT(line, HasSubstr(R"("id":"abc")"));
  EXPECT_THAT(line, HasSubstr(R"("model":"m\"x")"));
  EXPECT_THAT(line, HasSubstr(R"("worker":"http://w:1")"));
  EXPECT_THAT(line, HasSubstr(R"("status":200)"));
  EXPECT_THAT(line, HasSubstr(R"("bytes":42)"));
  EXPECT_THAT(line, HasSubstr(R"("ttfb_ms":12.5)"));
  EXPECT_THAT(line, HasSubstr(R"("e2e_ms":500)"));
  EXPECT_THAT(line, HasSubstr(R"("cached_tokens":64)"));
  EXPECT_THAT(line, HasSubstr(R"("prompt_tokens":80)"));
  EXPECT_THAT(line, HasSubstr(R"("api":"responses")"));
  EXPECT_THAT(line, HasSubstr(R"("response_id":"resp_1")"));
}

TEST(AccessLog, OmitsAbsentFields) {
  AccessRecord r;
  r.status = 503;
  const std::string line = AccessLog::Format(r);
  EXPECT_EQ(line.find("ttfb_ms"), std::string::npos);
  EXPECT_EQ(line.find("cached_tokens"), std::string::npos);
}

TEST(AccessLog, TraceContextJoinsTheLineToItsTrace) {
  AccessRecord r;
  r.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_THAT(AccessLog::Format(r), HasSubstr(R"("trace_id":"4bf92f3577b34da6a3ce929d0e0e4736",)"
                                              R"("span_id":"00f067aa0ba902b7")"));
  // A future version may add fields; version 00 may not.
  r.traceparent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
  EXPECT_THAT(AccessLog::Format(r), HasSubstr("trace_id"));
  for (const char* bad : {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"}) {
    r.traceparent = bad;
    EXPECT_EQ(AccessLog::Format(r).find("trace_id"), std::string::npos) << bad;
  }
}

TEST(AccessLog, BadPathIsAnError) {
  AccessLog log;
  EXPECT_FALSE(log.Open("/proc/kvgate-no-such-dir/access.log").ok());
  EXPECT_FALSE(log.enabled());
}

}  // namespace
}  // namespace kvgate::router
