// The request head kvgate writes to a worker: P/D stages send their own body (its length in
// Content-Length), the X-Request-Id both stages share, and vLLM's X-data-parallel-rank for a
// DP worker; the client's own id and rank headers never pass through twice.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http1.h"
#include "router/fleet/worker.h"
#include "router/upstream/http1_upstream.h"

namespace kvgate::router {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(UpstreamHead, StageBodyIdAndDpRank) {
  net::io_context ioc;
  ClientConnection conn(tcp::socket(ioc), /*admin_listener=*/false);
  Exchange ex(conn);
  const std::string raw =
      "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nX-Request-Id: client-1\r\n"
      "X-Data-Parallel-Rank: 7\r\nContent-Length: 2\r\n\r\n";
  ASSERT_EQ(http1::ParseRequestHead(raw, http1::ParseLimits{}, &ex.head).status,
            http1::ParseStatus::kComplete);
  ex.body = "{}";
  ex.request_id = "gw-id";
  config::WorkerConfig wc;
  wc.url = *common::ParseHttpUrl("http://10.0.0.9:8000");
  wc.dp_size = 4;
  Worker worker(wc);

  UpstreamAttempt plain;
  plain.worker = &worker;
  std::string head;
  AppendUpstreamHead(ex, plain, &head);
  EXPECT_THAT(head, HasSubstr("x-request-id: gw-id\r\n"));
  EXPECT_THAT(head, HasSubstr("content-length: 2\r\n"));
  EXPECT_THAT(head, HasSubstr("X-Data-Parallel-Rank: 7\r\n"));  // no rank chosen: the client's

  const std::string stage_body = R"({"max_tokens":1,"stream":false})";
  UpstreamAttempt stage;
  stage.worker = &worker;
  stage.dp_rank = 2;
  stage.body = &stage_body;
  stage.request_id = "___prefill_addr_a:1___decode_addr_b:2_ff";
  head.clear();
  AppendUpstreamHead(ex, stage, &head);
  EXPECT_THAT(head, HasSubstr("x-request-id: ___prefill_addr_a:1___decode_addr_b:2_ff\r\n"));
  EXPECT_THAT(head, Not(HasSubstr("client-1")));
  EXPECT_THAT(head, Not(HasSubstr("gw-id")));
  EXPECT_THAT(head, HasSubstr("x-data-parallel-rank: 2\r\n"));
  EXPECT_THAT(head, Not(HasSubstr(": 7\r\n")));
  EXPECT_THAT(head, HasSubstr("content-length: " + std::to_string(stage_body.size()) + "\r\n"));
  EXPECT_THAT(head, HasSubstr("host: 10.0.0.9:8000\r\n"));
}

}  // namespace
}  // namespace kvgate::router
