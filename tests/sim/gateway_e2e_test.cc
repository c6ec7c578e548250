// The gateway (kvgate, a separate process) in front of an in-process kvgate-sim: requests are
// proxied and streamed tokens arrive incrementally, not in one piece at the end.
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/server.h"
#include "tests/fakes/test_client.h"
#include "tests/support/child_process.h"
#include "tests/support/test_util.h"

namespace kvgate::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(GatewayEndToEnd, ProxiesToTheSimulatorAndStreamsIncrementally) {
  const std::string binary = testing::TestBinary("kvgate");
  if (binary.empty()) GTEST_SKIP() << "kvgate binary not built (set KVGATE_GATEWAY_BIN)";
  SimOptions o;
  o.base_port = 0;
  o.time_scale = 1.0;  // Real time: a decode step is ~7 ms, so 12 tokens take ~80 ms.
  o.profile.num_gpu_blocks = 512;
  SimProcess sim(o);
  ASSERT_TRUE(sim.Start().ok());
  sim.StartThread();
  testing::ChildProcess gw({binary, "--listen", "127.0.0.1:0", "--worker",
                            common::StrCat("http://127.0.0.1:", sim.ports()[0]), "--threads", "1"});
  const uint16_t port = gw.Port();
  ASSERT_NE(port, 0) << gw.Log();

  const std::string body =
      R"({"model":"sim-model","messages":[{"role":"user","content":"Tell me about caches."}],)"
      R"("max_tokens":12,"stream":true,"stream_options":{"include_usage":true}})";
  auto whole = testing::Fetch(port, "POST", "/v1/chat/completions",
                              R"({"model":"sim-model","messages":[{"role":"user","content":"hi"}],)"
                              R"("max_tokens":3})");
  ASSERT_EQ(whole.status, 200) << whole.body << gw.Log();
  EXPECT_THAT(whole.body, HasSubstr(R"("completion_tokens":3)"));

  testing::StreamingRequest s(port, "/v1/chat/completions", body, {{"x-request-id", "e2e-1"}});
  ASSERT_TRUE(s.ReadHeader());
  ASSERT_EQ(s.status(), 200) << gw.Log();
  EXPECT_EQ(s.Header("x-request-id"), "e2e-1");
  const std::string first = s.ReadSome();
  EXPECT_THAT(first, Not(HasSubstr("[DONE]")));  // The rest is still being generated.
  std::string all = first;
  int pieces = 1;
  while (!s.done()) {
    const std::string piece = s.ReadSome();
    if (piece.empty()) break;
    all += piece;
    ++pieces;
  }
  EXPECT_GE(pieces, 3) << all;  // Role chunk and tokens arrive over ~12 engine steps.
  EXPECT_THAT(all, HasSubstr("data: [DONE]"));
  EXPECT_THAT(all, HasSubstr(R"("completion_tokens":12)"));
  sim.Stop();
}

}  // namespace
}  // namespace kvgate::sim
